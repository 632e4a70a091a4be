# Regenerates the *.prompt.golden files with the reference's own prompt code:
# get_prompt is copied verbatim from ShishirPatil/gorilla openfunctions/inference_local.py
# (Apache-2.0). The function lists are written in the key order toolmesh uses (see doc.go).
# Run: python3 gen_golden.py
import json

def get_prompt(user_query: str, functions: list = []) -> str:
    system = "You are an AI programming assistant, utilizing the Gorilla LLM model, developed by Gorilla LLM, and you only answer questions related to computer science. For politically sensitive questions, security and privacy issues, and other non-computer science questions, you will refuse to answer."
    if len(functions) == 0:
        return f"{system}\n### Instruction: <<question>> {user_query}\n### Response: "
    functions_string = json.dumps(functions)
    return f"{system}\n### Instruction: <<function>>{functions_string}\n<<question>>{user_query}\n### Response: "

# inference_local.py, example 1 and example 2, verbatim.
functions_1 = [
    {
        "name": "get_current_weather",
        "description": "Get the current weather in a given location",
        "parameters": {
            "type": "object",
            "properties": {
                "location": {
                    "type": "string",
                    "description": "The city and state, e.g. San Francisco, CA",
                },
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["location"],
        },
    }
]
functions_2 = [{"name": "thermodynamics.calculate_boiling_point", "description": "Calculate the boiling point of a given substance at a specific pressure.", "parameters": {"type": "object", "properties": {"substance": {"type": "string", "description": "The substance for which to calculate the boiling point."}, "pressure": {"type": "number", "description": "The pressure at which to calculate the boiling point."}, "unit": {"type": "string", "description": "The unit of the pressure. Default is 'kPa'."}}, "required": ["substance", "pressure"]}}]

# Names that need mapping, non-ASCII, escapes, nested schemas, numbers.
functions_3 = [
    {"name": "github.create_issue", "description": "Créer une issue — \"quoted\" </script> \\ back\\slash\nline 2 😀", "parameters": {"type": "object", "properties": {
        "title": {"type": "string", "description": "Titel (Größe)"},
        "labels": {"type": "array", "description": "Labels", "items": {"type": "string"}},
        "priority": {"type": "integer", "enum": [1, 2, 3], "default": 2},
        "weight": {"type": "number", "maximum": 1e-07, "minimum": 0.5},
    }, "required": ["title"]}},
    {"name": "github.create_issue_2", "description": "Same name once sanitized: github.create-issue", "parameters": {"type": "object", "properties": {
        "class_": {"type": "boolean"},
        "meta": {"type": "object", "properties": {"owner": {"type": "string"}, "tags": {"type": "array", "items": {"type": "string"}}}, "required": ["owner"]},
        "x": {"type": ["string", "null"]},
    }}},
]

cases = {
    "weather": ("What's the weather like in the two cities of Boston and San Francisco?", functions_1),
    "boiling": ("What is the freezing point of water at a pressure of 10 kPa?", functions_2),
    "mapped": ("Open an issue 'Größe' with labels bug, ui — then tag it", functions_3),
    "notools": ("Explain what a mutex is.", []),
}
for name, (q, fns) in cases.items():
    with open(f"{name}.prompt.golden", "w", encoding="utf-8", newline="") as f:
        f.write(get_prompt(q, fns))
