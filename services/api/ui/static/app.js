// toolmesh console. One page with three views (servers, tools, playground) chosen by the URL's
// hash; everything it shows comes from the REST API, called with the tab's token. Plain DOM
// code: no framework and no build step, so what is in this file is what the browser runs.
'use strict';

const TOKEN_KEY = 'toolmesh.token';
const POLL_MS = 3000;
const SEARCH_DELAY_MS = 250;

const $ = (id) => document.getElementById(id);

// el builds an element. attrs are attributes (false, null and undefined are left out; true is
// an empty attribute; on* are event listeners); children are nodes or text. Text always goes
// in as text, never as HTML, so nothing a tool or a model says can inject markup.
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    e.append(c instanceof Node ? c : String(c));
  }
  return e;
}

function announce(text) {
  // Cleared first so the same words twice are read twice.
  const a = $('announce');
  a.textContent = '';
  setTimeout(() => { a.textContent = text; }, 50);
}

function pretty(v) { return JSON.stringify(v, null, 2); }

// codeText renders a message of the api, whose commands are set in `backticks`, with each
// command as code: the reader sees what to type, not the quoting.
function codeText(s) {
  return String(s || '').split('`').map((part, i) => (i % 2 ? el('code', {}, part) : part)).filter((p) => p !== '');
}

// ms writes a duration in milliseconds: two decimals below 10 ms, one below a second, then seconds.
function ms(v) {
  const n = Number(v) || 0;
  if (n >= 1000) return `${(n / 1000).toFixed(2)} s`;
  return `${n.toFixed(n < 10 ? 2 : 1)} ms`;
}

// ---------------------------------------------------------------------------------------------
// API access: the token is asked for once and kept in sessionStorage (this tab only, gone when
// it closes). Every request sends it; a 401 asks again and retries.

class APIError extends Error {
  constructor(status, body, traceID) {
    super((body && body.message) || `HTTP ${status}`);
    this.status = status;
    this.body = body || {};
    this.traceID = traceID || this.body.trace_id || '';
  }
}

const auth = {
  pending: null, // the open prompt, shared by every request that got a 401 meanwhile
  waiters: null, // its resolve and reject
  declined: false, // the prompt was cancelled: polls must not reopen it every few seconds
};

function needToken() {
  return new APIError(401, { message: 'This toolmesh needs an API token: choose "API token" at the top to give one.' });
}

function askToken(reason) {
  if (auth.declined) return Promise.reject(needToken());
  if (!auth.pending) {
    auth.pending = new Promise((resolve, reject) => { auth.waiters = { resolve, reject }; });
    openTokenDialog(reason);
  }
  return auth.pending;
}

function openTokenDialog(reason) {
  const err = $('token-error');
  err.textContent = reason || '';
  err.hidden = !reason;
  $('token-input').value = '';
  const d = $('token-dialog');
  if (!d.open) d.showModal();
  $('token-input').focus();
}

function closeTokenDialog(given) {
  const d = $('token-dialog');
  if (d.open) d.close();
  $('token-open').hidden = false;
  const w = auth.waiters;
  auth.pending = null;
  auth.waiters = null;
  if (w) given ? w.resolve() : w.reject(needToken());
}

function setUpTokenDialog() {
  $('token-form').addEventListener('submit', (e) => {
    e.preventDefault();
    const v = $('token-input').value.trim();
    if (!v) {
      $('token-error').textContent = 'Enter the token.';
      $('token-error').hidden = false;
      $('token-input').focus();
      return;
    }
    sessionStorage.setItem(TOKEN_KEY, v);
    auth.declined = false;
    closeTokenDialog(true);
  });
  const cancel = () => { auth.declined = true; closeTokenDialog(false); };
  $('token-cancel').addEventListener('click', cancel);
  $('token-dialog').addEventListener('cancel', (e) => { e.preventDefault(); cancel(); });
  $('token-open').addEventListener('click', () => {
    auth.declined = false;
    askToken('').then(() => { route(); mesh.refresh(); }, () => {});
  });
  if (sessionStorage.getItem(TOKEN_KEY)) $('token-open').hidden = false;
}

// api fetches a path with the tab's token; on 401 it asks for a token and tries again.
async function api(path, init = {}) {
  for (;;) {
    const headers = new Headers(init.headers || {});
    const token = sessionStorage.getItem(TOKEN_KEY) || '';
    if (token) headers.set('Authorization', 'Bearer ' + token);
    if (init.body) headers.set('Content-Type', 'application/json');
    const resp = await fetch(path, { ...init, headers });
    if (resp.status !== 401) return resp;
    const body = await readJSON(resp);
    await askToken(token ? `That token was refused: ${body.message || 'unauthorized'}.` : '');
  }
}

async function readJSON(resp) {
  const text = await resp.text();
  try {
    return JSON.parse(text);
  } catch {
    return { message: text.trim() || `HTTP ${resp.status} ${resp.statusText}` };
  }
}

async function getJSON(path) {
  const resp = await api(path);
  const body = await readJSON(resp);
  if (!resp.ok) throw new APIError(resp.status, body, resp.headers.get('X-Trace-Id'));
  return body;
}

// Paths are relative to /ui/, so the console also works behind a proxy that mounts the api
// under a prefix.
const API = '../v1/';

const config = { jaegerURL: '' };
let configLoaded = null;

function loadConfig() {
  configLoaded = getJSON('config.json')
    .then((c) => { config.jaegerURL = c.jaeger_url || ''; })
    .catch(() => {}); // without it the page still works, only without trace links
  return configLoaded;
}

// traceLink names a trace, as a link into Jaeger when the api was given --api.jaeger-url.
function traceLink(id) {
  if (!id) return null;
  if (!config.jaegerURL) return el('span', {}, 'trace ', el('code', {}, id));
  return el('a', {
    href: `${config.jaegerURL}/trace/${encodeURIComponent(id)}`,
    target: '_blank', rel: 'noopener noreferrer', class: 'trace-link',
  }, 'trace ', el('code', {}, id), ' in Jaeger');
}

function showError(node, err, what) {
  node.replaceChildren(`${what}: ${err.message}`);
  if (err.traceID) node.append(' (', traceLink(err.traceID), ')');
  node.hidden = false;
}

// ---------------------------------------------------------------------------------------------
// The mesh's state, shown on every page from GET /readyz: servers ready, the index, the model,
// and when the model does not answer, the command that fixes it (the api names it).

const MESH_POLL_MS = 10000;

const mesh = {
  state: null, // the last /readyz body; null when it could not be read
  key: '',
  busy: null,

  start() {
    this.refresh();
    setInterval(() => { if (!document.hidden) this.refresh(); }, MESH_POLL_MS);
  },

  // refresh reads /readyz again (one read at a time) and returns its body, or null.
  refresh() {
    if (!this.busy) {
      this.busy = this.read().finally(() => { this.busy = null; });
    }
    return this.busy;
  },

  async read() {
    let problem = '';
    try {
      const resp = await api('../readyz');
      const body = await readJSON(resp);
      // 503 is an answer too: its body says what is not ready.
      if (resp.ok || resp.status === 503) this.state = body;
      else problem = body.message || `HTTP ${resp.status}`;
    } catch (err) {
      problem = err.message;
    }
    if (problem) this.state = null;
    this.render(problem);
    return this.state;
  },

  render(problem) {
    const b = this.state;
    // Redrawn only when something changed: the bar is a live region, read out on change.
    const key = JSON.stringify([b, problem]);
    if (key === this.key) return;
    this.key = key;
    const box = $('mesh');
    if (!b) {
      box.replaceChildren(el('span', { class: 'badge warn' }, 'state unknown'), ' Could not read the mesh\'s state: ', problem);
      return;
    }
    const parts = [];
    const sep = () => el('span', { class: 'sep', 'aria-hidden': 'true' }, ' · ');
    if (b.executor) {
      parts.push(el('span', { class: 'badge bad' }, 'executor unreachable'));
    } else {
      // The servers the token may list: how many are connected, and which are not.
      const s = b.servers || {};
      const up = Number(s.ready) || 0;
      const down = (s.not_connected || []).length;
      parts.push(el('a', { href: '#/servers', class: 'badge ' + (down ? 'warn' : 'ok'), 'data-part': 'servers' }, `${up} of ${up + down} servers ready`));
    }
    if (typeof b.indexed_tools === 'number') {
      parts.push(sep(), el('span', { 'data-part': 'index' }, `${b.indexed_tools} ${b.indexed_tools === 1 ? 'tool' : 'tools'} indexed`));
    } else if (b.retriever) {
      // "index catching up: 3 of 11 tools indexed; last sync attempt: …": the first clause says it.
      parts.push(sep(), el('span', { class: 'badge warn', 'data-part': 'index', title: b.retriever }, b.retriever.split(';')[0]));
    } else {
      parts.push(sep(), el('span', { 'data-part': 'index' }, 'no retriever configured: search is off'));
    }
    const m = b.inference;
    if (!m) {
      parts.push(sep(), el('span', { 'data-part': 'model' }, 'no model configured: questions are off'));
    } else if (m.ready) {
      parts.push(sep(), el('span', { 'data-part': 'model' }, el('span', { class: 'badge ok' }, 'model ready'), m.model ? ' ' + m.model : ''));
    } else {
      parts.push(sep(), el('span', { 'data-part': 'model' }, el('span', { class: 'badge bad' }, 'model not ready'), ' ', modelHelp(m)));
    }
    box.replaceChildren(...parts);
  },
};

// modelHelp is one short sentence on a model that does not answer: the command that fixes it
// when the api names one, else the api's own reason.
function modelHelp(m) {
  if (m.fix) return el('span', { class: 'fix' }, 'Questions need it. To fix: ', codeText(m.fix));
  return el('span', { class: 'fix' }, 'Questions need it: ', codeText(String(m.error || 'it does not answer').split(';')[0]), '.');
}

// The OpenAPI document needs the token like the rest of the api, and a plain link sends none:
// with a token the link fetches it and opens what came back.
function setUpDocsLink() {
  $('api-docs').addEventListener('click', async (e) => {
    if (!sessionStorage.getItem(TOKEN_KEY)) return;
    e.preventDefault();
    try {
      const resp = await api(e.currentTarget.getAttribute('href'));
      const blob = new Blob([await resp.text()], { type: 'application/json' });
      const url = URL.createObjectURL(blob);
      window.open(url, '_blank');
      setTimeout(() => URL.revokeObjectURL(url), 60000);
    } catch (err) {
      announce('Could not open the API reference: ' + err.message);
    }
  });
}

// ---------------------------------------------------------------------------------------------
// Servers: every MCP server and its session, polled while the view is open and the tab shown.

const STATES = {
  SERVER_STATE_READY: ['ok', 'ready'],
  SERVER_STATE_DEGRADED: ['warn', 'degraded'],
  SERVER_STATE_CONNECTING: ['warn', 'connecting'],
  SERVER_STATE_UNHEALTHY: ['bad', 'unhealthy'],
  SERVER_STATE_STOPPED: ['info', 'stopped'],
};
const TRANSPORTS = {
  TRANSPORT_SSE: 'SSE',
  TRANSPORT_STREAMABLE_HTTP: 'streamable HTTP',
  TRANSPORT_STDIO: 'stdio',
};

const serversView = {
  timer: null,
  rows: new Map(),
  busy: false,
  marked: false,

  enter(arg, params, changed) {
    if (!changed) return;
    this.refresh();
    clearInterval(this.timer);
    this.timer = setInterval(() => { if (!document.hidden) this.refresh(); }, POLL_MS);
  },

  leave() {
    clearInterval(this.timer);
    this.timer = null;
  },

  async refresh() {
    if (this.busy) return;
    this.busy = true;
    try {
      const body = await getJSON(API + 'servers');
      // Server names are ASCII ([a-z0-9_-]): a plain comparison sorts them, and it avoids
      // Intl, whose first use costs tens of milliseconds in a fresh tab.
      const servers = (body.servers || []).slice().sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
      this.render(servers);
      mcpClients.render(servers, !!sessionStorage.getItem(TOKEN_KEY));
      $('servers-error').hidden = true;
      const ready = servers.filter((s) => s.state === 'SERVER_STATE_READY').length;
      $('servers-updated').textContent =
        `${ready} of ${servers.length} servers ready · updated ${clock(new Date())} · refreshes every ${POLL_MS / 1000} s`;
    } catch (err) {
      showError($('servers-error'), err, 'Could not list the servers');
    } finally {
      this.busy = false;
    }
  },

  render(servers) {
    const tbody = document.querySelector('#servers-table tbody');
    const seen = new Set();
    for (const s of servers) {
      seen.add(s.name);
      let row = this.rows.get(s.name);
      if (!row) {
        row = el('tr', { 'data-server': s.name }, el('th', { scope: 'row' }), ...Array.from({ length: 7 }, () => el('td')));
        this.rows.set(s.name, row);
      }
      tbody.append(row); // moves it into name order
      const [state, stateText] = STATES[s.state] || ['info', (s.state || 'unknown').replace('SERVER_STATE_', '').toLowerCase()];
      const version = [s.server_name !== s.name ? s.server_name : '', s.server_version].filter(Boolean).join(' ');
      const cells = [
        // A name the config gives that is not a valid server name is shown beside the one it is
        // served as, so the user finds the server they wrote ("GitHub" served as github).
        [s.name, s.config_name, version, () => [el('strong', {}, s.name),
          s.config_name ? el('span', { class: 'meta', title: 'the name in the config' }, ` (“${s.config_name}”)`) : null,
          version ? el('span', { class: 'meta' }, ' ', version) : null]],
        [state + stateText, () => el('span', { class: 'badge ' + state }, stateText)],
        [s.transport, () => TRANSPORTS[s.transport] || s.transport || '—'],
        [s.endpoint, () => el('code', {}, s.endpoint || '—')],
        [s.protocol_version, () => s.protocol_version || '—'],
        [s.tool_count, () => el('a', { href: '#/tools?server=' + encodeURIComponent(s.name), 'aria-label': `${s.tool_count} tools of ${s.name}` }, String(s.tool_count || 0))],
        [s.connected_at, () => connectedAt(s.connected_at)],
        [s.last_error, () => s.last_error || '—'],
      ];
      cells.forEach((spec, i) => {
        const render = spec[spec.length - 1];
        const key = JSON.stringify(spec.slice(0, -1));
        const cell = row.children[i];
        // Only cells whose data changed are redrawn, so a poll does not take keyboard focus
        // away from a link in the table.
        if (cell.dataset.key === key) return;
        cell.dataset.key = key;
        cell.replaceChildren(...[render()].flat().filter((c) => c !== null));
        cell.classList.toggle('error-cell', i === 7 && !!s.last_error);
      });
    }
    for (const [name, row] of this.rows) {
      if (!seen.has(name)) {
        row.remove();
        this.rows.delete(name);
      }
    }
    if (!this.marked) {
      // The browser test reads this mark: time from navigation to servers on screen. It is
      // set once the frame with the rows has been drawn (the next task after that frame's
      // animation callbacks), not merely when they are in the DOM.
      this.marked = true;
      requestAnimationFrame(() => setTimeout(() => performance.mark('toolmesh:servers-rendered'), 0));
    }
  },
};

// mcpClients fills the "Use from an MCP client" part of the servers page: the MCP endpoint
// URLs of the mesh the console is served by, and client configs to copy. The token is never
// put in them (a placeholder stands for it): a config copied into a chat or a screenshot must
// not carry a secret.
const mcpClients = {
  shown: '',

  render(servers, needsToken) {
    const base = location.origin;
    const key = JSON.stringify([base, needsToken, servers.map((s) => s.name)]);
    if (key === this.shown) return;
    this.shown = key;
    const item = (path, what) => el('li', {}, el('code', {}, base + path), ' ', what);
    $('mcp-endpoints').replaceChildren(
      item('/mcp', '— every tool your token may call, named SERVER__TOOL'),
      item('/mcp/search', '— two tools, search_tools and call_tool, for catalogs too big to list'),
      ...servers.map((s) => item('/mcp/servers/' + encodeURIComponent(s.name), `— the tools of ${s.name} under their own names`)),
      item('/sse', '— the catalog over the legacy SSE transport'),
    );
    const vscode = { servers: { toolmesh: { type: 'http', url: base + '/mcp' } } };
    const claude = { mcpServers: { toolmesh: { command: 'toolmesh', args: ['connect'], env: { TOOLMESH_API: base } } } };
    if (needsToken) {
      vscode.servers.toolmesh.headers = { Authorization: 'Bearer ${input:toolmesh-token}' };
      vscode.inputs = [{ id: 'toolmesh-token', type: 'promptString', description: 'toolmesh API token', password: true }];
      claude.mcpServers.toolmesh.env.TOOLMESH_TOKEN = 'YOUR_TOKEN';
    }
    $('mcp-vscode').textContent = pretty(vscode);
    $('mcp-claude').textContent = pretty(claude);
    $('mcp-token-note').textContent = needsToken
      ? 'This mesh needs an API token: VS Code asks for it; put yours in place of YOUR_TOKEN for Claude Desktop.'
      : '';
  },

  // copy puts a config on the clipboard; where the browser offers none (a page not served
  // over https or from localhost), it selects the text for Ctrl-C.
  async copy(button) {
    const code = $(button.dataset.copy);
    try {
      await navigator.clipboard.writeText(code.textContent);
      button.textContent = 'Copied';
      announce('Copied');
    } catch {
      getSelection().selectAllChildren(code);
      button.textContent = 'Selected: press Ctrl-C';
    }
    setTimeout(() => { button.textContent = 'Copy'; }, 2000);
  },
};

document.addEventListener('click', (e) => {
  const b = e.target.closest && e.target.closest('button[data-copy]');
  if (b) mcpClients.copy(b);
});

function connectedAt(ts) {
  if (!ts) return '—';
  const d = new Date(ts);
  if (Number.isNaN(d.getTime()) || d.getFullYear() < 2000) return '—';
  return el('time', { datetime: d.toISOString(), title: d.toString() }, `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${clock(d)}`);
}

// Dates are written by hand, not with toLocaleString: see the sort in serversView.refresh.
function pad(n) { return String(n).padStart(2, '0'); }
function clock(d) { return `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`; }

// ---------------------------------------------------------------------------------------------
// Tools: the catalog, retriever search with scores, a tool's schema and a call form made from it.

const toolsView = {
  catalog: [],
  byID: new Map(),
  loaded: null,
  searchSeq: 0,
  searchTimer: null,
  results: null, // the last search's results, or null when the list is the catalog
  selected: '',

  setUp() {
    $('search-form').addEventListener('submit', (e) => {
      e.preventDefault();
      clearTimeout(this.searchTimer);
      this.search();
    });
    $('search-q').addEventListener('input', () => {
      clearTimeout(this.searchTimer);
      this.searchTimer = setTimeout(() => this.search(), SEARCH_DELAY_MS);
    });
    $('search-server').addEventListener('change', () => this.search());
    $('search-k').addEventListener('change', () => { if ($('search-q').value.trim()) this.search(); });
  },

  enter(arg, params, changed) {
    const server = params.get('server');
    if (changed || server !== null) {
      // The catalog is read again each time the view opens: servers come and go.
      if (server !== null) $('search-server').dataset.want = server;
      pending.load();
      this.loaded = this.loadCatalog();
      this.loaded.then(() => {
        if (server !== null) this.search();
        else if (!this.results) this.renderList();
      });
    }
    this.select(arg);
  },

  leave() {},

  async loadCatalog() {
    try {
      const body = await getJSON(API + 'tools');
      this.catalog = body.tools || [];
      for (const t of this.catalog) this.byID.set(t.id, t);
      this.fillServers();
      $('tools-error').hidden = true;
    } catch (err) {
      showError($('tools-error'), err, 'Could not list the tools');
    }
  },

  fillServers() {
    const select = $('search-server');
    const want = select.dataset.want !== undefined ? select.dataset.want : select.value;
    delete select.dataset.want;
    const names = [...new Set(this.catalog.map((t) => t.server))].sort();
    select.replaceChildren(el('option', { value: '' }, 'All servers'), ...names.map((n) => el('option', { value: n }, n)));
    select.value = names.includes(want) ? want : '';
  },

  async search() {
    const q = $('search-q').value.trim();
    const server = $('search-server').value;
    const seq = ++this.searchSeq;
    if (!q) {
      this.results = null;
      this.renderList();
      return;
    }
    let k = parseInt($('search-k').value, 10);
    if (!(k >= 1 && k <= 50)) k = 10;
    const params = new URLSearchParams({ q, k: String(k) });
    if (server) params.append('server', server);
    $('tools-summary').textContent = 'Searching…';
    try {
      const body = await getJSON(API + 'tools:search?' + params);
      if (seq !== this.searchSeq) return; // a newer search was started meanwhile
      this.results = body.results || [];
      for (const r of this.results) if (r.tool && !this.byID.has(r.tool.id)) this.byID.set(r.tool.id, r.tool);
      $('tools-error').hidden = true;
      this.renderList(q);
    } catch (err) {
      if (seq !== this.searchSeq) return;
      $('tools-summary').textContent = '';
      showError($('tools-error'), err, 'Search failed');
    }
  },

  renderList(q) {
    const server = $('search-server').value;
    let items;
    if (this.results) {
      items = this.results.map((r) => ({ tool: r.tool, score: r.score }));
      $('tools-summary').textContent = items.length === 0
        ? `No tool matches “${q}”.`
        : `${items.length} ${items.length === 1 ? 'tool matches' : 'tools match'} “${q}”, best first`;
    } else {
      items = this.catalog.filter((t) => !server || t.server === server).map((tool) => ({ tool }));
      $('tools-summary').textContent = `${items.length} ${items.length === 1 ? 'tool' : 'tools'}${server ? ' of ' + server : ''}`;
    }
    $('tools-list').replaceChildren(...items.map(({ tool, score }) => el('li', { 'data-tool-id': tool.id },
      el('a', { href: '#/tools/' + encodeURIComponent(tool.id), 'aria-current': tool.id === this.selected ? 'true' : false },
        score !== undefined ? el('span', { class: 'badge info score' }, 'score ' + Number(score).toFixed(2)) : null,
        trustBadges(tool),
        el('span', { class: 'id' }, tool.id),
        el('span', { class: 'desc' }, firstSentence(tool.description))))));
  },

  async select(id) {
    const focus = !routing.first;
    this.selected = id || '';
    for (const a of $('tools-list').querySelectorAll('a')) {
      const li = a.closest('li');
      if (li.dataset.toolId === this.selected) a.setAttribute('aria-current', 'true');
      else a.removeAttribute('aria-current');
    }
    const pane = $('tool-detail');
    if (!id) {
      pane.replaceChildren(el('p', { class: 'meta' }, 'Choose a tool to see its schema and call it.'));
      return;
    }
    if (!this.byID.has(id)) await this.loaded;
    if (this.selected !== id) return;
    const tool = this.byID.get(id);
    if (!tool) {
      pane.replaceChildren(el('p', { class: 'error' }, `No tool named ${id}.`));
      return;
    }
    await configLoaded;
    pane.replaceChildren(...renderTool(tool));
    const h = pane.querySelector('h2');
    if (h && focus) h.focus();
  },
};

// ----- tool trust (mcpServers pinning): flags on the tools, and the definitions waiting for an
// admin's approval, each with its diff and an Approve button.

const FINDING_WORDS = {
  FINDING_KIND_HIDDEN_CHARACTERS: 'hidden characters removed',
  FINDING_KIND_MODEL_INSTRUCTION: 'instructions to the model',
  FINDING_KIND_CONCEAL_FROM_USER: 'hides things from the user',
  FINDING_KIND_READ_SECRETS: 'reads files or secrets',
};

function trustBadges(tool) {
  const out = [];
  if (tool.pin === 'PIN_STATE_CHANGED') out.push(el('span', { class: 'badge warn', 'data-trust': 'changed' }, 'changed since approved'));
  if ((tool.findings || []).length) out.push(el('span', { class: 'badge bad', 'data-trust': 'flagged' }, 'flagged'));
  return out;
}

function findingList(findings) {
  return el('ul', { class: 'findings' }, findings.map((f) => el('li', { 'data-kind': f.kind },
    el('strong', {}, FINDING_WORDS[f.kind] || f.kind), ` in ${f.field} (${f.rule}): `, el('code', {}, f.excerpt))));
}

function trustNotes(tool) {
  const out = [];
  if (tool.pin === 'PIN_STATE_CHANGED') {
    out.push(el('p', { class: 'warn-note', 'data-trust': 'changed' },
      'Its definition changed since it was approved (pinning: warn): it is still offered and callable. An admin reviews it under Waiting for approval.'));
  }
  const findings = tool.findings || [];
  if (findings.length) out.push(el('div', { class: 'trust', 'aria-label': 'Findings in its definition' }, el('p', { class: 'warn-note' }, 'Flagged:'), findingList(findings)));
  return out;
}

function diffView(diff) {
  return el('pre', { class: 'diff' }, (diff || '').replace(/\n$/, '').split('\n').map((line) => {
    const cls = line.startsWith('+++') || line.startsWith('---') ? 'head' : line[0] === '+' ? 'add' : line[0] === '-' ? 'del' : line.startsWith('@@') ? 'gap' : '';
    return el('span', { class: cls }, line + '\n');
  }));
}

const pending = {
  seq: 0,

  // load shows the pending definitions to an admin; anyone else (403) sees nothing of them.
  async load() {
    const seq = ++this.seq;
    let tools;
    try {
      tools = (await getJSON(API + 'tools:pending')).tools || [];
    } catch (err) {
      if (seq !== this.seq) return;
      if (err.status === 403 || err.status === 401) {
        $('pending').hidden = true;
        return;
      }
      showError($('pending-error'), err, 'Could not list the tools waiting for approval');
      $('pending').hidden = false;
      return;
    }
    if (seq !== this.seq) return;
    $('pending-error').hidden = true;
    $('pending').hidden = tools.length === 0;
    $('pending-list').replaceChildren(...tools.map((p) => this.item(p)));
  },

  item(p) {
    const t = p.tool || {};
    const why = p.pinned ? `its definition changed since it was pinned (${p.pinned_by || 'first seen'})` : 'it was first seen with findings';
    const status = el('p', { class: 'meta', role: 'status' });
    const button = el('button', { type: 'button', 'data-approve': t.id }, 'Approve ' + t.id);
    button.addEventListener('click', () => this.approve(t, button, status));
    return el('li', { 'data-tool-id': t.id },
      el('h3', {}, t.id, ' ', p.quarantined
        ? el('span', { class: 'badge bad' }, 'quarantined')
        : el('span', { class: 'badge warn' }, 'flagged')),
      el('p', {}, p.quarantined ? `Not listed, offered or callable: ${why}.` : `Still offered and callable: ${why}.`),
      (t.findings || []).length ? findingList(t.findings) : null,
      el('details', { open: true }, el('summary', {}, 'What changed'), diffView(p.diff)),
      el('div', { class: 'row' }, button, status));
  },

  async approve(t, button, status) {
    button.disabled = true;
    status.textContent = 'Approving…';
    try {
      const resp = await api(`${API}tools/${encodeURIComponent(t.server)}/${encodeURIComponent(t.name)}:approve`, {
        method: 'POST', body: JSON.stringify({ hash: t.hash }),
      });
      const body = await readJSON(resp);
      if (!resp.ok) {
        status.textContent = resp.status === 409 ? 'It changed again meanwhile: read the new diff.' : `Not approved: ${body.message || resp.status}`;
        button.disabled = false;
        if (resp.status === 409) this.load();
        return;
      }
      announce(`${t.id} approved`);
      this.load();
      toolsView.loaded = toolsView.loadCatalog().then(() => { if (!toolsView.results) toolsView.renderList(); });
    } catch (err) {
      status.textContent = 'Not approved: ' + err.message;
      button.disabled = false;
    }
  },
};

function firstSentence(s) {
  s = (s || '').trim();
  // A sentence ends at . ! or ? before a capital letter or the end ("e.g. 2" goes on).
  const m = s.match(/^[\s\S]*?[.!?](?=\s+[A-Z(]|$)/);
  const out = m ? m[0].trim() : s;
  return out.length > 140 ? out.slice(0, 139) + '…' : out;
}

const HINTS = [
  ['read_only_hint', 'read-only', 'info'],
  ['destructive_hint', 'destructive', 'bad'],
  ['idempotent_hint', 'idempotent', 'info'],
  ['open_world_hint', 'open world', 'warn'],
];

function renderTool(tool) {
  const ann = tool.annotations || {};
  const badges = HINTS.filter(([k]) => ann[k] === true).map(([, text, cls]) => el('span', { class: 'badge ' + cls }, text));
  const out = [
    el('h2', { id: 'tool-title', tabindex: '-1' }, tool.id),
    el('p', { class: 'meta' }, [tool.title, 'server ' + tool.server].filter(Boolean).join(' · ')),
    el('p', { class: 'tool-description' }, tool.description || '(no description)'),
  ];
  if (badges.length) out.push(el('div', { class: 'annotations', 'aria-label': 'Hints from the server' }, badges));
  out.push(...trustNotes(tool));
  out.push(el('details', {}, el('summary', {}, 'Input schema'), el('pre', {}, pretty(tool.input_schema || {}))));
  if (tool.output_schema) out.push(el('details', {}, el('summary', {}, 'Output schema'), el('pre', {}, pretty(tool.output_schema))));
  out.push(...callForm(tool));
  return out;
}

// ----- the call form, generated from the input schema

function kindOf(s) {
  if (Array.isArray(s.enum) && s.enum.length > 0) return 'enum';
  let t = s.type;
  if (Array.isArray(t)) {
    const notNull = t.filter((x) => x !== 'null');
    t = notNull.length === 1 ? notNull[0] : undefined;
  }
  return ['number', 'integer', 'boolean', 'string', 'array', 'object'].includes(t) ? t : 'json';
}

function callForm(tool) {
  const schema = tool.input_schema || {};
  const required = schema.required || [];
  const fields = Object.entries(schema.properties || {}).map(([name, s], i) => ({
    name, schema: s || {}, required: required.includes(name), kind: kindOf(s || {}), id: `arg-${i}`,
  }));
  // Required fields first, in the order the schema lists them (its author's order: the
  // properties themselves arrive sorted by name), then the optional ones.
  const rank = (f) => (f.required ? required.indexOf(f.name) : required.length);
  fields.sort((a, b) => rank(a) - rank(b));

  const form = el('form', { id: 'call-form', novalidate: true, 'aria-labelledby': 'call-title' });
  form.append(el('h3', { id: 'call-title' }, 'Call ' + tool.id));
  if (fields.length === 0) form.append(el('p', { class: 'meta' }, 'This tool takes no arguments.'));
  else if (fields.some((f) => f.required)) form.append(el('p', { class: 'hint' }, 'Fields marked * are required.'));
  for (const f of fields) {
    f.control = control(f);
    form.append(el('div', { class: 'field', 'data-field': f.name },
      el('label', { for: f.id }, f.name,
        f.required ? [el('span', { class: 'req', 'aria-hidden': 'true' }, '*'), el('span', { class: 'visually-hidden' }, ' (required)')] : null,
        el('span', { class: 'type' }, typeText(f))),
      f.control,
      f.schema.description ? el('p', { id: f.id + '-desc', class: 'hint' }, f.schema.description) : null,
      el('p', { id: f.id + '-err', class: 'field-error', hidden: true })));
  }
  const summary = el('p', { id: 'call-form-error', class: 'error', role: 'alert', hidden: true });
  const button = el('button', { type: 'submit' }, 'Call');
  form.append(summary, el('div', { class: 'row' }, button));
  const result = el('div', { id: 'call-result', class: 'result', 'aria-live': 'polite' });

  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    const args = {};
    const problems = [];
    for (const f of fields) {
      const r = readField(f);
      if (r.missing && f.required) r.error = 'is required';
      setFieldError(f, r.error);
      if (r.error) problems.push(f);
      else if (!r.missing) args[f.name] = r.value;
    }
    if (problems.length > 0) {
      summary.textContent = `Not sent: ${problems.map((f) => `${f.name} ${f.error}`).join('; ')}.`;
      summary.hidden = false;
      problems[0].control.focus();
      return;
    }
    summary.hidden = true;
    button.disabled = true;
    result.replaceChildren(el('p', { class: 'meta' }, 'Calling…'));
    try {
      const resp = await api(`${API}tools/${encodeURIComponent(tool.server)}/${encodeURIComponent(tool.name)}:call`, {
        method: 'POST', body: JSON.stringify({ arguments: args }),
      });
      const body = await readJSON(resp);
      const trace = resp.headers.get('X-Trace-Id') || body.trace_id;
      result.replaceChildren(...(resp.ok ? callResult(body, trace) : callFailure(resp.status, body, trace)));
      if (!resp.ok) showViolations(fields, body);
    } catch (err) {
      result.replaceChildren(el('p', { class: 'error' }, 'The call failed: ' + err.message));
    } finally {
      button.disabled = false;
    }
  });
  return [form, result];
}

function typeText(f) {
  if (f.kind === 'string' && typeof f.schema.pattern === 'string') return `string matching ${f.schema.pattern}`;
  if (f.kind === 'enum') return 'one of ' + f.schema.enum.map((v) => JSON.stringify(v)).join(', ');
  if (f.kind === 'array' || f.kind === 'object') return f.kind + ' as JSON';
  if (f.kind === 'json') return 'JSON';
  return f.kind;
}

function control(f) {
  const s = f.schema;
  const described = [s.description ? f.id + '-desc' : '', f.id + '-err'].filter(Boolean).join(' ');
  const common = { id: f.id, name: f.name, required: f.required, 'aria-describedby': described };
  let c;
  switch (f.kind) {
    case 'number':
    case 'integer':
      c = el('input', { ...common, type: 'number', step: f.kind === 'integer' ? '1' : 'any', inputmode: f.kind === 'integer' ? 'numeric' : 'decimal', min: s.minimum, max: s.maximum });
      break;
    case 'boolean':
      c = el('select', common, el('option', { value: '' }, f.required ? 'choose…' : '(not set)'), el('option', { value: 'true' }, 'true'), el('option', { value: 'false' }, 'false'));
      break;
    case 'enum':
      c = el('select', common, el('option', { value: '' }, f.required ? 'choose…' : '(not set)'),
        s.enum.map((v, i) => el('option', { value: String(i) }, typeof v === 'string' ? v : JSON.stringify(v))));
      break;
    case 'string':
      c = (s.maxLength || 0) > 200 || s.maxLength === undefined && /sql|query|expression|text|code/i.test(f.name)
        ? el('textarea', { ...common, rows: '3', spellcheck: 'false' })
        : el('input', { ...common, type: 'text', autocomplete: 'off' });
      break;
    default:
      c = el('textarea', { ...common, rows: '4', spellcheck: 'false', class: 'mono', placeholder: f.kind === 'array' ? '[ ... ]' : f.kind === 'object' ? '{ ... }' : 'any JSON value' });
  }
  if (s.default !== undefined) {
    if (f.kind === 'enum') c.value = String(s.enum.findIndex((v) => JSON.stringify(v) === JSON.stringify(s.default)));
    else if (f.kind === 'json' || f.kind === 'array' || f.kind === 'object') c.value = pretty(s.default);
    else c.value = String(s.default);
  }
  return c;
}

// readField reads one control as the schema's type: {value}, {missing: true} or {error}.
function readField(f) {
  const s = f.schema;
  const c = f.control;
  const v = c.value;
  switch (f.kind) {
    case 'number':
    case 'integer': {
      if (c.validity.badInput) return { error: 'must be a number' };
      if (v.trim() === '') return { missing: true };
      const n = Number(v);
      if (!Number.isFinite(n)) return { error: 'must be a number' };
      if (f.kind === 'integer' && !Number.isInteger(n)) return { error: 'must be a whole number' };
      if (typeof s.minimum === 'number' && n < s.minimum) return { error: `must be at least ${s.minimum}` };
      if (typeof s.maximum === 'number' && n > s.maximum) return { error: `must be at most ${s.maximum}` };
      if (typeof s.exclusiveMinimum === 'number' && n <= s.exclusiveMinimum) return { error: `must be above ${s.exclusiveMinimum}` };
      if (typeof s.exclusiveMaximum === 'number' && n >= s.exclusiveMaximum) return { error: `must be below ${s.exclusiveMaximum}` };
      return { value: n };
    }
    case 'boolean':
      return v === '' ? { missing: true } : { value: v === 'true' };
    case 'enum':
      return v === '' ? { missing: true } : { value: s.enum[Number(v)] };
    case 'string': {
      if (v === '') return { missing: true };
      const len = [...v].length;
      if (typeof s.minLength === 'number' && len < s.minLength) return { error: `must be at least ${s.minLength} characters` };
      if (typeof s.maxLength === 'number' && len > s.maxLength) return { error: `must be at most ${s.maxLength} characters` };
      // A schema's pattern is not run here: it comes from the tool's server, and a pattern such
      // as ^(a+)+$ takes this browser's backtracking engine exponential time (a hung tab). The
      // executor checks it with Go's regexp, whose time is linear in the input, and the refusal
      // names the field (see showViolations).
      return { value: v };
    }
    default: {
      if (v.trim() === '') return { missing: true };
      let parsed;
      try {
        parsed = JSON.parse(v);
      } catch (err) {
        return { error: 'is not valid JSON: ' + err.message };
      }
      if (f.kind === 'array' && !Array.isArray(parsed)) return { error: 'must be a JSON array, like [1, 2]' };
      if (f.kind === 'object' && (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed))) {
        return { error: 'must be a JSON object, like {"key": "value"}' };
      }
      return { value: parsed };
    }
  }
}

// showViolations marks the fields the api refused (arguments.NAME…) as the form's own checks do.
function showViolations(fields, body) {
  let first = null;
  for (const v of (body.details || []).flatMap((d) => d.field_violations || [])) {
    const name = String(v.field || '').replace(/^arguments\./, '').split(/[.[]/)[0];
    const f = fields.find((x) => x.name === name);
    if (!f || f.error) continue;
    setFieldError(f, 'was refused: ' + v.description);
    first = first || f;
  }
  if (first) first.control.focus();
}

function setFieldError(f, error) {
  f.error = error || '';
  const p = $(f.id + '-err');
  p.textContent = error ? `${f.name} ${error}.` : '';
  p.hidden = !error;
  if (error) f.control.setAttribute('aria-invalid', 'true');
  else f.control.removeAttribute('aria-invalid');
}

function callResult(body, trace) {
  const isError = !!body.is_error;
  const out = [el('h3', {}, isError ? 'The tool answered with an error' : 'Result', ' ',
    el('span', { class: 'badge ' + (isError ? 'bad' : 'ok') }, isError ? 'tool error' : 'ok'))];
  const meta = [];
  if (typeof body.duration_ms === 'number') meta.push(`took ${ms(body.duration_ms)}`);
  out.push(el('p', { class: 'meta' }, meta.join(' · '), meta.length && trace ? ' · ' : '', traceLink(trace)));
  for (const c of body.content || []) out.push(contentBlock(c, isError));
  if (body.structured_content) {
    out.push(el('details', {}, el('summary', {}, 'Structured content'), el('pre', {}, pretty(body.structured_content))));
  }
  return out;
}

function contentBlock(c, isError) {
  if (c.type === 'text' || (c.type === 'resource' && c.text !== undefined)) {
    return el('pre', { class: 'content-text' + (isError ? ' error' : '') }, c.text || '');
  }
  if ((c.type === 'image') && c.data && /^image\/(png|jpeg|gif|webp)$/.test(c.mime_type || '')) {
    return el('img', { src: `data:${c.mime_type};base64,${c.data}`, alt: `image from the tool (${c.mime_type})` });
  }
  if (c.type === 'resource_link' && c.uri) {
    return el('p', {}, 'Resource: ', el('code', {}, c.uri), c.text ? ' — ' + c.text : '');
  }
  return el('pre', {}, pretty(c));
}

function callFailure(status, body, trace) {
  const out = [el('h3', {}, 'The call was refused ', el('span', { class: 'badge bad' }, 'HTTP ' + status))];
  out.push(el('p', { class: 'error call-error' }, body.message || 'no message'));
  const violations = (body.details || []).flatMap((d) => d.field_violations || []);
  if (violations.length) out.push(el('ul', {}, violations.map((v) => el('li', {}, el('code', {}, v.field), ': ', v.description))));
  if (trace) out.push(el('p', { class: 'meta' }, traceLink(trace)));
  return out;
}

// ---------------------------------------------------------------------------------------------
// Prompts and resources: what the MCP servers offer besides tools (GET /v1/prompts, /v1/resources,
// /v1/resources:templates), a form for a prompt's arguments (POST /v1/prompts/S/N:get) and a
// resource's contents (GET /v1/resources/S:read?uri=U).

const contextView = {
  loaded: null, // the server filter last loaded; null before the first load

  enter(arg, params) {
    const server = params.get('server') || '';
    if (this.loaded === server && arg === '') return;
    this.loaded = server;
    this.load(server);
  },

  leave() {},

  setUp() {
    $('context-server').addEventListener('change', (e) => {
      const v = e.target.value;
      location.hash = '#/context' + (v ? '?server=' + encodeURIComponent(v) : '');
    });
  },

  async load(server) {
    const q = server ? '?server=' + encodeURIComponent(server) : '';
    $('context-error').hidden = true;
    $('context-summary').textContent = 'Loading…';
    try {
      const [ps, rs, ts, ss] = await Promise.all([getJSON(API + 'prompts' + q), getJSON(API + 'resources' + q),
        getJSON(API + 'resources:templates' + q), getJSON(API + 'servers')]);
      const select = $('context-server');
      const names = (ss.servers || []).map((s) => s.name).sort();
      select.replaceChildren(el('option', { value: '' }, 'All servers'), ...names.map((n) => el('option', { value: n }, n)));
      select.value = server;
      this.renderPrompts(ps.prompts || []);
      this.renderResources(rs.resources || []);
      this.renderTemplates(ts.resource_templates || []);
      const failed = Object.entries({ ...(ps.errors || {}), ...(rs.errors || {}) }).map(([s, e]) => `${s}: ${e}`);
      $('context-summary').textContent = `${(ps.prompts || []).length} prompts, ${(rs.resources || []).length} resources, ` +
        `${(ts.resource_templates || []).length} templates` + (failed.length ? ` · not listed: ${failed.join('; ')}` : '');
    } catch (err) {
      $('context-summary').textContent = '';
      showError($('context-error'), err, 'Could not list the prompts and resources');
    }
  },

  renderPrompts(prompts) {
    $('prompts-list').replaceChildren(...prompts.map((p) => el('li', {},
      el('button', { type: 'button', class: 'linkish', 'data-prompt': p.id, onclick: () => this.showPrompt(p) }, el('code', {}, p.id)),
      p.description ? el('p', { class: 'meta' }, firstSentence(p.description)) : null)));
    if (!prompts.length) $('prompts-list').replaceChildren(el('li', { class: 'meta' }, 'None'));
  },

  renderResources(resources) {
    $('resources-list').replaceChildren(...resources.map((r) => el('li', {},
      el('button', { type: 'button', class: 'linkish', 'data-resource': r.uri, onclick: () => this.read(r.server, r.uri) }, el('code', {}, r.uri)),
      el('p', { class: 'meta' }, [r.server, r.name, r.mime_type].filter(Boolean).join(' · ')))));
    if (!resources.length) $('resources-list').replaceChildren(el('li', { class: 'meta' }, 'None'));
  },

  renderTemplates(templates) {
    $('templates-list').replaceChildren(...templates.map((t) => {
      const id = 'tpl-' + Math.random().toString(36).slice(2);
      const input = el('input', { id, type: 'text', value: t.uri_template, autocomplete: 'off' });
      const form = el('form', { class: 'row' },
        el('div', { class: 'field grow' }, el('label', { for: id }, `URI (${t.server} · ${t.name})`), input),
        el('button', { type: 'submit' }, 'Read'));
      form.addEventListener('submit', (e) => { e.preventDefault(); this.read(t.server, input.value.trim()); });
      return el('li', {}, form);
    }));
    if (!templates.length) $('templates-list').replaceChildren(el('li', { class: 'meta' }, 'None'));
  },

  showPrompt(p) {
    const fields = (p.arguments || []).map((a) => {
      const id = 'prompt-arg-' + a.name;
      return el('div', { class: 'field', 'data-field': a.name },
        el('label', { for: id }, a.title || a.name, a.required ? el('span', { class: 'meta' }, ' (required)') : null),
        el('input', { id, type: 'text', name: a.name, autocomplete: 'off', required: a.required ? '' : null,
          'aria-describedby': a.description ? id + '-hint' : null }),
        a.description ? el('p', { id: id + '-hint', class: 'hint' }, a.description) : null);
    });
    const out = el('div', { id: 'prompt-result', 'aria-live': 'polite' });
    const form = el('form', { id: 'prompt-form' }, ...fields, el('button', { type: 'submit' }, 'Get prompt'));
    form.addEventListener('submit', async (e) => {
      e.preventDefault();
      const args = {};
      for (const input of form.querySelectorAll('input[name]')) if (input.value !== '') args[input.name] = input.value;
      out.replaceChildren(el('p', { class: 'meta' }, 'Getting…'));
      const resp = await api(API + `prompts/${encodeURIComponent(p.server)}/${encodeURIComponent(p.name)}:get`,
        { method: 'POST', body: JSON.stringify({ arguments: args }) });
      const body = await readJSON(resp);
      if (!resp.ok) { out.replaceChildren(...callFailure(resp.status, body, resp.headers.get('X-Trace-Id'))); return; }
      out.replaceChildren(...(body.description ? [el('p', {}, body.description)] : []),
        ...(body.messages || []).map((m) => el('div', { class: 'prompt-message' }, el('h3', {}, m.role), contentBlock(m.content || {}, false))));
    });
    $('context-detail').replaceChildren(el('h2', {}, el('code', {}, p.id)), p.title ? el('p', {}, p.title) : null,
      p.description ? el('p', { class: 'meta' }, p.description) : null, form, out);
  },

  async read(server, uri) {
    const out = $('context-detail');
    out.replaceChildren(el('h2', {}, el('code', {}, uri)), el('p', { class: 'meta' }, 'Reading…'));
    const resp = await api(API + `resources/${encodeURIComponent(server)}:read?uri=${encodeURIComponent(uri)}`);
    const body = await readJSON(resp);
    if (!resp.ok) { out.replaceChildren(el('h2', {}, el('code', {}, uri)), ...callFailure(resp.status, body, resp.headers.get('X-Trace-Id'))); return; }
    out.replaceChildren(el('h2', {}, el('code', {}, uri)), el('p', { class: 'meta' }, server),
      ...(body.contents || []).map((c) => {
        if (c.text !== undefined && c.text !== null) return el('pre', { class: 'content-text resource-text' }, c.text);
        const n = c.blob ? Math.floor(c.blob.length * 3 / 4) : 0;
        if (c.blob && /^image\/(png|jpeg|gif|webp)$/.test(c.mime_type || '')) {
          return el('img', { src: `data:${c.mime_type};base64,${c.blob}`, alt: `${uri} (${c.mime_type})` });
        }
        return el('p', { class: 'resource-blob' }, `${n} bytes of ${c.mime_type || 'binary data'} `,
          el('a', { href: `data:${c.mime_type || 'application/octet-stream'};base64,${c.blob || ''}`, download: uri.split('/').pop() || 'resource' }, 'Download'));
      }));
  },
};

// ---------------------------------------------------------------------------------------------
// Playground: a chat. Each question is a turn, asked of /v1/query:stream with the earlier turns
// as `messages`; a turn shows its answer as it streams and, folded under it, the steps, tool
// calls and waterfall of how it was answered.

// GRPC_UNAVAILABLE is the gRPC code of an error the REST api answers with 503.
const GRPC_UNAVAILABLE = 14;

const STOPS = {
  STOP_REASON_ANSWERED: 'answered',
  STOP_REASON_MAX_ITERATIONS: 'stopped at the step limit',
  STOP_REASON_DEADLINE: 'ran out of time',
  STOP_REASON_ERROR: 'failed',
  STOP_REASON_TOOL_ERROR: 'the tool reported an error',
  STOP_REASON_FUNCTION_CALLS: 'stopped for function calls',
};

// The stop reasons of a turn with an answer to go on from: it is sent with later questions.
const ANSWERED = new Set(['STOP_REASON_ANSWERED', 'STOP_REASON_MAX_ITERATIONS']);

// The api takes at most 256 messages and 512 KiB of them in one request: the console sends the
// newest turns within a little less, and says so when it leaves older ones out.
const MAX_CONTEXT_TURNS = 120;
const MAX_CONTEXT_BYTES = 480 << 10;

let turnIDs = 0; // numbers the turns' element ids, unique across new chats

const playgroundView = {
  controller: null,
  turns: [], // the conversation, oldest first

  setUp() {
    $('ask-form').addEventListener('submit', (e) => { e.preventDefault(); this.ask(); });
    $('stop').addEventListener('click', () => this.stop());
    $('new-chat').addEventListener('click', () => this.newChat());
    $('question').addEventListener('keydown', (e) => {
      if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) { e.preventDefault(); this.ask(); }
    });
    document.addEventListener('keydown', (e) => {
      if (e.key === 'Escape' && this.controller && routing.current === 'playground' && !$('token-dialog').open) {
        e.preventDefault();
        this.stop();
      }
    });
  },

  enter() {},
  leave() {}, // a running question goes on while another view is open

  stop() {
    if (this.controller) this.controller.abort();
  },

  // newChat forgets the conversation; the system message and the options stay. A question
  // still running is stopped: its answer would belong to no conversation.
  newChat() {
    this.stop();
    this.turns = [];
    $('conversation').replaceChildren();
    this.showTurns();
    $('run-status').textContent = '';
    $('question').focus();
    announce('New chat: the conversation was cleared.');
  },

  showTurns() {
    const any = this.turns.length > 0;
    $('conversation').hidden = !any;
    $('chat-empty').hidden = any;
    $('new-chat').disabled = !any;
  },

  // context is what goes before a new question: the system message, then the question and
  // answer of each earlier turn, the newest that fit in one request. Only answered turns go
  // in: a turn that failed or was stopped is shown but not sent, since it has no answer (or
  // half of one) and its question alone would put two user messages in a row, which the model
  // reads as a question still open and answers again along with the new one. The failed
  // question is put back in the box instead, to ask again if it still matters.
  context() {
    const system = $('system-message').value.trim();
    let bytes = new TextEncoder().encode(system).length;
    const turns = [];
    let left = 0;
    for (const t of this.turns.filter((t) => t.ok).reverse()) {
      const size = new TextEncoder().encode(t.question + t.answerText).length;
      if (left || turns.length === MAX_CONTEXT_TURNS || bytes + size > MAX_CONTEXT_BYTES) {
        left++;
        continue;
      }
      bytes += size;
      turns.unshift(t);
    }
    const messages = system ? [{ role: 'system', content: system }] : [];
    for (const t of turns) messages.push({ role: 'user', content: t.question }, { role: 'assistant', content: t.answerText });
    return { messages, left };
  },

  async ask() {
    if (this.controller) return;
    const status = $('run-status');
    const q = $('question').value.trim();
    if (!q) {
      status.textContent = 'Type a question first.';
      $('question').focus();
      return;
    }
    const body = { query: q };
    for (const [id, key] of [['ask-k', 'k'], ['ask-iterations', 'max_iterations'], ['ask-timeout', 'timeout_seconds']]) {
      const v = $(id).value.trim();
      if (!v) continue;
      const n = Number(v);
      if (!Number.isInteger(n) || n < Number($(id).min) || n > Number($(id).max)) {
        status.textContent = `${$(id).labels[0].textContent} must be a whole number from ${$(id).min} to ${$(id).max}.`;
        $('ask-options').open = true;
        $(id).focus();
        return;
      }
      body[key] = n;
    }
    // A direct call (@SERVER.TOOL) runs no model, so it needs no context; with messages the
    // api would take it for a question to the model. Its result is context for later turns.
    const sent = q.startsWith('@') ? { messages: [], left: 0 } : this.context();
    if (sent.messages.length) body.messages = sent.messages;

    for (const t of this.turns) t.fold();
    const turn = new Turn(this.turns.length + 1, q, sent);
    this.turns.push(turn);
    $('conversation').append(turn.li);
    this.showTurns();
    turn.li.scrollIntoView({ block: 'nearest' });
    $('question').value = '';
    this.controller = new AbortController();
    $('ask').disabled = true;
    $('stop').disabled = false;
    status.textContent = 'Asking…';
    announce('Asking');
    try {
      await configLoaded;
      const resp = await api(API + 'query:stream', {
        method: 'POST', body: JSON.stringify(body), signal: this.controller.signal,
      });
      turn.setTrace(resp.headers.get('X-Trace-Id') || '');
      if (!resp.ok) {
        // A stream refused before it began says why as {"error": {...}}, like an error in it.
        const b = await readJSON(resp);
        const message = b.message || (b.error && b.error.message);
        if (resp.status === 503) turn.unavailable(message || 'HTTP 503');
        else turn.error(message || `HTTP ${resp.status}`);
        return;
      }
      // The body is newline-delimited JSON, one event a line; a read may end mid-line.
      const reader = resp.body.getReader();
      const decoder = new TextDecoder();
      let buf = '';
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += decoder.decode(value, { stream: true });
        let nl;
        while ((nl = buf.indexOf('\n')) >= 0) {
          const line = buf.slice(0, nl).trim();
          buf = buf.slice(nl + 1);
          if (line) turn.line(line);
        }
      }
      buf += decoder.decode();
      if (buf.trim()) turn.line(buf.trim());
      if (!turn.finished) turn.error('The stream ended before the query was done.');
    } catch (err) {
      if (err.name === 'AbortError') turn.stopped();
      else turn.error(err.message);
    } finally {
      this.controller = null;
      $('ask').disabled = false;
      $('stop').disabled = true;
      turn.settle();
      // A turn of a chat since cleared (New chat stopped it) has nothing more to say.
      if (this.turns.includes(turn)) {
        if (!turn.ok && !$('question').value) $('question').value = q;
        status.textContent = turn.summary();
        announce(turn.ok ? `${turn.summary()} ${turn.answerText.slice(0, 300)}` : turn.summary());
        if (document.activeElement === document.body || document.activeElement === $('stop')) $('question').focus();
      }
    }
  },
};

// Turn is one question of the conversation: the user's words, the answer as it streams (or what
// went wrong), and, folded under them, /v1/query:stream's events in arrival order, ending with
// the waterfall.
class Turn {
  constructor(number, question, sent) {
    this.question = question;
    this.calls = new Map();
    this.answer = null; // the answer's paragraph, from the first delta on
    this.answerText = '';
    this.finished = false;
    this.ok = false; // answered: sent with later questions
    this.outcome = '';
    this.trace = '';
    this.steps = 0;
    this.tools = [];
    this.fit = { turns: 0, summarized: 0, dropped: 0 };
    this.left = sent.left;
    this.duration = 0;

    const id = `turn-${++turnIDs}`;
    this.traceLine = el('span', { class: 'turn-trace meta' });
    this.body = el('div', { class: 'reply-body' });
    this.note = el('p', { class: 'history-note meta', hidden: true });
    this.list = el('ol', { class: 'timeline', 'aria-label': `How question ${number} was answered` });
    this.stepsText = el('span', { class: 'steps-summary' }, 'running…');
    this.details = el('details', { class: 'turn-steps', open: true },
      el('summary', {}, 'Steps, tool calls and timing: ', this.stepsText), this.list);
    this.li = el('li', { class: 'turn', id, 'data-state': 'running', 'aria-labelledby': id + '-title' },
      el('h2', { id: id + '-title', class: 'visually-hidden' }, `Question ${number}`),
      el('div', { class: 'msg user' }, el('p', { class: 'who' }, 'You'), el('p', { class: 'user-text' }, question)),
      el('div', { class: 'msg reply' }, el('p', { class: 'who' }, 'toolmesh ', this.traceLine), this.body, this.note),
      this.details);
    this.showFit();
  }

  // fold closes the turn's steps: an older turn shows its question and answer, and its steps
  // and waterfall one click away.
  fold() {
    this.details.open = false;
  }

  setTrace(id) {
    this.trace = id;
    this.traceLine.replaceChildren(id ? traceLink(id) : '');
  }

  add(kind, title, ...body) {
    const li = el('li', { 'data-kind': kind }, el('h3', {}, title), ...body);
    this.list.append(li);
    return li;
  }

  // report shows how the turn ended when that is not simply its answer: in the reply, never
  // folded away.
  report(kind, ...body) {
    const box = el('div', { class: 'outcome', 'data-kind': kind }, ...body);
    this.body.append(box);
    return box;
  }

  line(text) {
    let msg;
    try {
      msg = JSON.parse(text);
    } catch {
      this.error('The api sent a line that is not JSON: ' + text.slice(0, 200));
      return;
    }
    if (msg.error) {
      // A stream that has begun reports its error in the stream: UNAVAILABLE is the 503.
      if (msg.error.code === GRPC_UNAVAILABLE) this.unavailable(msg.error.message || 'unavailable');
      else this.error(msg.error.message || JSON.stringify(msg.error));
      return;
    }
    const ev = msg.result || {};
    if (ev.retrieved) this.retrieved(ev.retrieved);
    else if (ev.model_output) this.modelOutput(ev.model_output);
    else if (ev.tool_call_started) this.call(ev.tool_call_started, false);
    else if (ev.tool_call_finished) this.call(ev.tool_call_finished, true);
    else if (typeof ev.answer_delta === 'string') this.delta(ev.answer_delta);
    else if (ev.done) this.done(ev.done);
  }

  retrieved(step) {
    this.steps = Math.max(this.steps, step.number || 0);
    const tools = step.retrieved || [];
    const dropped = step.dropped_tool_ids || [];
    this.add('retrieved', `Step ${step.number}: ${tools.length} ${tools.length === 1 ? 'tool' : 'tools'} retrieved in ${ms(step.retrieval_ms)}`,
      tools.length === 0 ? el('p', { class: 'meta' }, 'No tool matched; the model answers without tools.')
        : el('ol', { class: 'scores' }, tools.map((r) => el('li', { 'data-tool-id': r.tool.id },
          el('a', { href: '#/tools/' + encodeURIComponent(r.tool.id) }, el('code', {}, r.tool.id)),
          ' ', el('span', { class: 'meta' }, 'score ' + Number(r.score).toFixed(2))))),
      dropped.length ? el('p', { class: 'meta' }, 'Left out of the prompt (it would not fit): ', dropped.join(', ')) : null);
  }

  modelOutput(step) {
    const u = step.usage;
    const h = step.history;
    this.addFit(h);
    this.add('model_output', `Step ${step.number}: the model's output, in ${ms(step.model_ms)}`,
      el('pre', { class: 'model-output' }, step.model_output || '(empty)'),
      u ? el('p', { class: 'meta' }, `${u.prompt_tokens} prompt tokens, ${u.completion_tokens} completion tokens`) : null,
      h && h.turns ? el('p', { class: 'meta step-history' }, historyText(h)) : null);
  }

  call(rec, finished) {
    let li = this.calls.get(rec.index);
    if (!li) {
      li = this.add('call', `Step ${rec.step}: call ${rec.tool}`,
        el('p', { class: 'meta' }, 'Arguments'), el('pre', { class: 'call-args' }, pretty(rec.arguments || {})),
        el('p', { class: 'call-status' }, el('span', { class: 'badge warn' }, 'running…')));
      li.dataset.index = rec.index;
      this.calls.set(rec.index, li);
      this.tools.push(rec.tool);
    }
    if (!finished) return;
    const status = li.querySelector('.call-status');
    status.replaceChildren(
      el('span', { class: 'badge ' + (rec.is_error ? 'bad' : 'ok') }, rec.is_error ? 'tool error' : 'done'),
      ` in ${ms(rec.duration_ms)}`);
    li.append(el('p', { class: 'meta' }, rec.is_error ? 'Error' : 'Result'), el('pre', { class: 'call-output' + (rec.is_error ? ' error' : '') }, rec.output || ''));
  }

  delta(text) {
    if (!this.answer) {
      this.answer = el('p', { class: 'answer-text' });
      this.body.prepend(this.answer);
    }
    this.answer.append(text);
    this.answerText += text;
  }

  done(r) {
    this.finished = true;
    if (!this.answer && r.answer) this.delta(r.answer);
    this.outcome = STOPS[r.stop_reason] || r.stop_reason || 'done';
    this.ok = ANSWERED.has(r.stop_reason) && this.answerText.trim() !== '';
    this.duration = Number(r.duration_ms) || 0;
    for (const s of r.steps || []) this.addFit(s.history);
    // An answered turn's error is a remark (a limit cut the work short), a failed one's the cause.
    if (r.error) this.report(this.ok ? 'remark' : 'error', el('p', { class: this.ok ? 'meta' : 'error' }, codeText(r.error)));
    const trace = r.trace_id || this.trace;
    if (trace && !this.trace) this.setTrace(trace);
    const steps = r.iterations === 1 ? '1 step' : `${r.iterations} steps`;
    const calls = (r.tool_calls || []).length;
    this.add('done', `Done: ${this.outcome}`,
      el('p', {}, `${steps}, ${calls} tool ${calls === 1 ? 'call' : 'calls'}`, r.duration_ms ? ` in ${ms(r.duration_ms)}.` : '.'),
      waterfall(r),
      trace ? el('p', { class: 'meta' }, traceLink(trace)) : null);
  }

  error(message) {
    this.finished = true;
    this.outcome = 'failed';
    this.report('error', el('p', { class: 'error' }, codeText(message)));
  }

  // unavailable explains a 503: the mesh cannot answer questions now. When the model is what
  // is missing (the usual case on a first start) it says so in one sentence with the command
  // that fixes it; the api's own words are one click away.
  // The mesh's state is read again first: what is missing now, and what the api says fixes it.
  unavailable(message) {
    this.finished = true;
    this.outcome = 'not answered';
    const box = this.report('unavailable', el('h3', {}, 'Not answered: the mesh cannot answer now'),
      el('details', {}, el('summary', {}, 'What the api said'), el('p', { class: 'api-message' }, codeText(message))));
    mesh.refresh().then((state) => {
      const m = state && state.inference;
      if (!state || (m && m.ready)) {
        box.querySelector('details').open = true;
        return;
      }
      box.querySelector('h3').textContent = 'Not answered: no model answers questions yet';
      const fix = !m ? 'No inference service is configured.' : m.fix ? ['To fix: ', codeText(m.fix)] : codeText(String(m.error || '').split(';')[0]);
      box.querySelector('details').before(el('p', { class: 'fix' }, fix),
        el('p', { class: 'meta' }, 'Tool search and direct calls work without a model: try ', el('code', {}, '@SERVER.TOOL({...})'), ', as the hint below shows.'));
    });
  }

  stopped() {
    this.finished = true;
    this.outcome = 'stopped';
    this.report('stopped', el('p', {}, 'Stopped: you stopped the question; the api cancels the rest of its work.'));
  }

  // settle marks the turn's end: its state, the folded summary of its steps, and whether it
  // goes with later questions.
  settle() {
    this.li.dataset.state = this.ok ? 'answered' : this.outcome === 'stopped' ? 'stopped' : 'failed';
    if (!this.ok) this.body.append(el('p', { class: 'meta not-sent' }, 'Not sent with later questions: this turn has no answer to go on from.'));
    const parts = [];
    if (this.steps) parts.push(this.steps === 1 ? '1 step' : `${this.steps} steps`);
    const n = this.calls.size;
    if (this.steps || n) parts.push(`${n} tool ${n === 1 ? 'call' : 'calls'}` + (n ? ` (${[...new Set(this.tools)].join(', ')})` : ''));
    if (this.duration) parts.push(ms(this.duration));
    if (!this.ok) parts.push(this.outcome);
    this.stepsText.textContent = parts.join(' · ');
    // Refused before its first step, the turn has no steps to show.
    this.details.hidden = this.list.children.length === 0;
  }

  // addFit keeps the step's history fit when it saw less of the conversation than the steps
  // before it: the turn's note tells of its most crowded prompt.
  addFit(h) {
    if (!h) return;
    const f = { turns: Number(h.turns) || 0, summarized: Number(h.summarized) || 0, dropped: Number(h.dropped) || 0 };
    if (f.dropped < this.fit.dropped || (f.dropped === this.fit.dropped && f.summarized <= this.fit.summarized)) return;
    this.fit = f;
    this.showFit();
  }

  // showFit says, under the answer, when the model saw less than the whole conversation.
  showFit() {
    const f = this.fit;
    const parts = [];
    const older = (n) => `${n} older ${n === 1 ? 'turn' : 'turns'}`;
    if (f.summarized) parts.push(`${older(f.summarized)} shortened`);
    if (f.dropped) parts.push(`${parts.length ? f.dropped : older(f.dropped)} left out`);
    const text = [];
    if (parts.length) text.push(`${parts.join(', ')} to fit the model's context.`);
    if (this.left) {
      text.push(`${this.left === 1 ? 'The oldest answered turn was' : `The ${this.left} oldest answered turns were`} not sent: ` +
        `a request holds at most ${MAX_CONTEXT_TURNS} turns and ${MAX_CONTEXT_BYTES >> 10} KiB of them.`);
    }
    this.note.textContent = text.join(' ');
    this.note.hidden = text.length === 0;
  }

  summary() {
    return this.outcome ? `Query ${this.outcome}.` : '';
  }
}

// historyText says how a step's prompt held the earlier turns.
function historyText(h) {
  const turns = Number(h.turns) || 0;
  const cut = [];
  if (h.summarized) cut.push(`${h.summarized} shortened`);
  if (h.dropped) cut.push(`${h.dropped} left out`);
  return `${turns} earlier ${turns === 1 ? 'turn' : 'turns'} given` + (cut.length ? `: ${cut.join(', ')} to fit the context.` : ', all whole.');
}

// waterfall draws where a query's time went, from its response alone: each step's retrieval
// and model turn, each tool call and the composing of the answer, on one time axis from the
// query's start. A table, so that the figures are read out too; the bars are decoration.
function waterfall(r) {
  const rows = [];
  for (const s of r.steps || []) {
    if (s.retrieval_ms) rows.push({ kind: 'retrieval', label: `Step ${s.number}: retrieval`, start: s.retrieval_start_ms, took: s.retrieval_ms });
    if (s.model_ms) rows.push({ kind: 'model', label: `Step ${s.number}: model`, start: s.model_start_ms, took: s.model_ms });
  }
  for (const c of r.tool_calls || []) {
    if (!c.start_ms && !c.duration_ms) continue; // refused before it was sent: it took no time
    rows.push({ kind: c.is_error ? 'call-error' : 'call', label: `Step ${c.step}: ${c.tool}`, start: c.start_ms, took: c.duration_ms });
  }
  if (r.compose_ms) rows.push({ kind: 'compose', label: 'Composing the answer', start: r.compose_start_ms, took: r.compose_ms });
  if (rows.length === 0) return null;
  for (const x of rows) { x.start = Number(x.start) || 0; x.took = Number(x.took) || 0; }
  rows.sort((a, b) => a.start - b.start);
  const total = Math.max(Number(r.duration_ms) || 0, ...rows.map((x) => x.start + x.took)) || 1;
  const pct = (v) => `${Math.min(100, Math.max(0, (v / total) * 100)).toFixed(3)}%`;
  return el('table', { class: 'waterfall' },
    el('caption', {}, `Where the time went: ${ms(total)} in all`),
    el('thead', {}, el('tr', {}, el('th', { scope: 'col' }, 'Part'), el('th', { scope: 'col', class: 'num' }, 'Starts at'),
      el('th', { scope: 'col', class: 'num' }, 'Took'), el('th', { scope: 'col', class: 'track-head' }, el('span', { class: 'visually-hidden' }, 'Bar'), '0', el('span', { class: 'end' }, ms(total))))),
    el('tbody', {}, rows.map((x) => {
      const bar = el('span', { class: 'bar' });
      // Set through the CSSOM: the page's Content-Security-Policy refuses style attributes.
      bar.style.left = pct(x.start);
      bar.style.width = pct(x.took);
      return el('tr', { 'data-kind': x.kind },
        el('th', { scope: 'row' }, x.label), el('td', { class: 'num' }, ms(x.start)), el('td', { class: 'num' }, ms(x.took)),
        el('td', { class: 'track', 'aria-hidden': 'true' }, bar));
    })));
}

// ---------------------------------------------------------------------------------------------
// Routing: #/servers, #/tools[/SERVER.TOOL][?server=S], #/playground.

const views = { servers: serversView, tools: toolsView, context: contextView, playground: playgroundView };
const TITLES = { servers: 'Servers', tools: 'Tools', context: 'Prompts & resources', playground: 'Playground' };
const routing = { current: '', first: true };

function route() {
  const hash = location.hash;
  if (hash && !hash.startsWith('#/')) return; // an in-page link such as #main
  const [path, query] = hash.slice(2).split('?');
  const [name, ...rest] = path.split('/');
  const view = views[name] ? name : 'servers';
  const arg = decodeURIComponent(rest.join('/'));
  const params = new URLSearchParams(query || '');
  for (const v of Object.keys(views)) $('page-' + v).hidden = v !== view;
  for (const a of document.querySelectorAll('nav a[data-route]')) {
    if (a.dataset.route === view) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  document.title = `${TITLES[view]} · toolmesh`;
  const changed = routing.current !== view;
  if (changed && routing.current) views[routing.current].leave();
  routing.current = view;
  views[view].enter(arg, params, changed);
  // Moving focus to the new view's heading tells screen readers where they are; not on the
  // first load, where focus starts at the top of the page as usual.
  if (changed && !routing.first) $(view + '-title').focus();
  routing.first = false;
}

function start() {
  setUpTokenDialog();
  toolsView.setUp();
  contextView.setUp();
  playgroundView.setUp();
  $('skip').addEventListener('click', (e) => { e.preventDefault(); $('main').focus(); });
  document.addEventListener('visibilitychange', () => {
    if (document.hidden) return;
    if (routing.current === 'servers') serversView.refresh();
    mesh.refresh();
  });
  window.addEventListener('hashchange', route);
  setUpDocsLink();
  loadConfig();
  if (!location.hash.startsWith('#/')) history.replaceState(null, '', '#/servers');
  route();
  mesh.start();
}

start();
