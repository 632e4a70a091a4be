-- The demo database of toolmesh's sqlite MCP server: a small company with
-- departments, employees and their current salaries. WriteDemo runs this
-- file into a new database; keep it deterministic (no random(), no dates
-- relative to now) so every copy is the same and tests can check numbers.
--
-- Engineering: 10 people, payroll 1,252,000, average salary 125,200.

BEGIN;

CREATE TABLE departments (
    id         INTEGER PRIMARY KEY,
    name       TEXT    NOT NULL UNIQUE,
    location   TEXT    NOT NULL,
    budget_usd INTEGER NOT NULL -- yearly budget, US dollars
);

CREATE TABLE employees (
    id            INTEGER PRIMARY KEY,
    first_name    TEXT    NOT NULL,
    last_name     TEXT    NOT NULL,
    email         TEXT    NOT NULL UNIQUE,
    job_title     TEXT    NOT NULL,
    department_id INTEGER NOT NULL REFERENCES departments(id),
    manager_id    INTEGER REFERENCES employees(id), -- NULL for department heads
    hire_date     TEXT    NOT NULL                 -- YYYY-MM-DD
);

-- One row per employee: the current salary.
CREATE TABLE salaries (
    employee_id       INTEGER PRIMARY KEY REFERENCES employees(id),
    annual_salary_usd INTEGER NOT NULL,
    effective_date    TEXT    NOT NULL -- YYYY-MM-DD, when this salary started
);

INSERT INTO departments (id, name, location, budget_usd) VALUES
    (1, 'Engineering',     'San Francisco', 2500000),
    (2, 'Sales',           'New York',      1200000),
    (3, 'Marketing',       'Chicago',        900000),
    (4, 'Finance',         'New York',       700000),
    (5, 'Human Resources', 'Austin',         500000);

INSERT INTO employees (id, first_name, last_name, email, job_title, department_id, manager_id, hire_date) VALUES
    ( 1, 'Maya',    'Chen',      'maya.chen@example.com',       'VP of Engineering',         1, NULL, '2015-03-02'),
    ( 2, 'Daniel',  'Okafor',    'daniel.okafor@example.com',   'Engineering Manager',       1,    1, '2016-07-18'),
    ( 3, 'Priya',   'Raman',     'priya.raman@example.com',     'Staff Software Engineer',   1,    2, '2017-01-09'),
    ( 4, 'Lucas',   'Moreau',    'lucas.moreau@example.com',    'Senior Software Engineer',  1,    2, '2018-05-21'),
    ( 5, 'Sofia',   'Alvarez',   'sofia.alvarez@example.com',   'Senior Software Engineer',  1,    2, '2019-02-11'),
    ( 6, 'Kenji',   'Watanabe',  'kenji.watanabe@example.com',  'Software Engineer',         1,    2, '2019-10-01'),
    ( 7, 'Amara',   'Nwosu',     'amara.nwosu@example.com',     'Software Engineer',         1,    2, '2020-06-15'),
    ( 8, 'Tom',     'Becker',    'tom.becker@example.com',      'DevOps Engineer',           1,    2, '2021-03-29'),
    ( 9, 'Hannah',  'Kowalski',  'hannah.kowalski@example.com', 'QA Engineer',               1,    2, '2022-01-10'),
    (10, 'Ravi',    'Patel',     'ravi.patel@example.com',      'Junior Software Engineer',  1,    2, '2023-08-07'),
    (11, 'Olivia',  'Grant',     'olivia.grant@example.com',    'Head of Sales',             2, NULL, '2016-02-01'),
    (12, 'Marcus',  'Reid',      'marcus.reid@example.com',     'Account Executive',         2,   11, '2018-09-10'),
    (13, 'Elena',   'Petrova',   'elena.petrova@example.com',   'Account Executive',         2,   11, '2019-04-22'),
    (14, 'James',   'O''Connor', 'james.oconnor@example.com',   'Account Executive',         2,   11, '2020-11-02'),
    (15, 'Fatima',  'Zahra',     'fatima.zahra@example.com',    'Sales Development Rep',     2,   11, '2021-07-19'),
    (16, 'Noah',    'Fischer',   'noah.fischer@example.com',    'Sales Development Rep',     2,   11, '2022-05-16'),
    (17, 'Chloe',   'Dubois',    'chloe.dubois@example.com',    'Sales Coordinator',         2,   11, '2023-02-27'),
    (18, 'Isabel',  'Santos',    'isabel.santos@example.com',   'Marketing Director',        3, NULL, '2017-04-03'),
    (19, 'Ethan',   'Brooks',    'ethan.brooks@example.com',    'Product Marketing Manager', 3,   18, '2019-08-12'),
    (20, 'Mei',     'Lin',       'mei.lin@example.com',         'Content Strategist',        3,   18, '2020-03-09'),
    (21, 'Samuel',  'Adeyemi',   'samuel.adeyemi@example.com',  'Marketing Analyst',         3,   18, '2021-10-25'),
    (22, 'Grace',   'Kim',       'grace.kim@example.com',       'Social Media Specialist',   3,   18, '2023-05-08'),
    (23, 'Robert',  'Hughes',    'robert.hughes@example.com',   'Finance Director',          4, NULL, '2015-09-14'),
    (24, 'Aisha',   'Rahman',    'aisha.rahman@example.com',    'Senior Accountant',         4,   23, '2018-01-15'),
    (25, 'Victor',  'Lindqvist', 'victor.lindqvist@example.com','Financial Analyst',         4,   23, '2020-08-03'),
    (26, 'Laura',   'Bianchi',   'laura.bianchi@example.com',   'Accountant',                4,   23, '2022-09-19'),
    (27, 'Nadia',   'Haddad',    'nadia.haddad@example.com',    'HR Director',               5, NULL, '2016-11-07'),
    (28, 'Peter',   'Novak',     'peter.novak@example.com',     'HR Business Partner',       5,   27, '2019-06-03'),
    (29, 'Zoe',     'Martins',   'zoe.martins@example.com',     'Recruiter',                 5,   27, '2021-01-18'),
    (30, 'Leo',     'Schmidt',   'leo.schmidt@example.com',     'HR Assistant',              5,   27, '2023-10-02');

INSERT INTO salaries (employee_id, annual_salary_usd, effective_date) VALUES
    ( 1, 165000, '2024-04-01'),
    ( 2, 142000, '2024-04-01'),
    ( 3, 138000, '2024-04-01'),
    ( 4, 131000, '2024-04-01'),
    ( 5, 126000, '2023-04-01'),
    ( 6, 121000, '2024-04-01'),
    ( 7, 118000, '2023-04-01'),
    ( 8, 112000, '2024-04-01'),
    ( 9, 104000, '2024-04-01'),
    (10,  95000, '2023-08-07'),
    (11, 148000, '2024-04-01'),
    (12,  96000, '2024-04-01'),
    (13,  88000, '2023-04-01'),
    (14,  82000, '2024-04-01'),
    (15,  79000, '2024-04-01'),
    (16,  74000, '2023-04-01'),
    (17,  68000, '2023-02-27'),
    (18, 132000, '2024-04-01'),
    (19,  94000, '2024-04-01'),
    (20,  86000, '2023-04-01'),
    (21,  78000, '2024-04-01'),
    (22,  70000, '2023-05-08'),
    (23, 140000, '2024-04-01'),
    (24, 105000, '2024-04-01'),
    (25,  92000, '2023-04-01'),
    (26,  83000, '2024-04-01'),
    (27, 118000, '2024-04-01'),
    (28,  84000, '2024-04-01'),
    (29,  76000, '2023-04-01'),
    (30,  62000, '2023-10-02');

COMMIT;
