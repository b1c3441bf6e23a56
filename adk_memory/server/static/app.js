// adk-memory memory browser: banks, memories by scope (topics, metadata, expiry), revisions.
// It calls the server's own REST API (/v1beta1/…) with the key typed in the page, which is kept in
// sessionStorage only. Every text from the store is written with textContent, never as HTML.
"use strict";

const API = "/v1beta1/";
const KEY_ITEM = "adk-memory-api-key";
const PAGE_SIZE = 50;
const SEARCH_TOP_K = 50;

const state = { bank: null, pageToken: null, memories: [], distances: new Map() };

const $ = (id) => document.getElementById(id);

function el(tag, text, attributes) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  for (const [name, value] of Object.entries(attributes || {})) node.setAttribute(name, value);
  return node;
}

function status(message, isError) {
  const line = $("status");
  line.textContent = message || "";
  line.className = isError ? "error" : "";
}

async function api(method, path, body) {
  const headers = { Accept: "application/json" };
  const key = sessionStorage.getItem(KEY_ITEM);
  if (key) headers["x-goog-api-key"] = key;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(API + path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    credentials: "omit",
    cache: "no-store",
  });
  const payload = await response.json().catch(() => ({}));
  if (!response.ok) {
    const error = payload.error || {};
    const what = error.status ? `${response.status} ${error.status}` : `${response.status}`;
    throw new Error(`${what}: ${error.message || response.statusText}`);
  }
  return payload;
}

function shortName(name) {
  return (name || "").split("/").pop();
}

function relative(name) {
  // A full resource name is also a valid path under /v1beta1/.
  return name.replace(/^\/+/, "");
}

function when(value) {
  return value ? value.replace("T", " ").replace(/\.\d+/, "").replace("Z", " UTC") : "—";
}

function scopeText(scope) {
  return Object.keys(scope || {})
    .sort()
    .map((key) => `${key}=${scope[key]}`)
    .join(", ");
}

function topicsText(topics) {
  return (topics || [])
    .map((topic) => topic.managedMemoryTopic || topic.customMemoryTopicLabel || "")
    .filter(Boolean)
    .join(", ");
}

function metadataText(metadata) {
  return Object.entries(metadata || {})
    .map(([key, value]) => {
      const shown = ["stringValue", "doubleValue", "boolValue", "timestampValue"]
        .map((field) => value[field])
        .find((item) => item !== undefined);
      return `${key}=${shown}`;
    })
    .join(", ");
}

function parseScope(text) {
  const scope = {};
  for (const part of text.split(",")) {
    const entry = part.trim();
    if (!entry) continue;
    const at = entry.indexOf("=");
    if (at <= 0) throw new Error(`scope entries are KEY=VALUE, got "${entry}"`);
    scope[entry.slice(0, at).trim()] = entry.slice(at + 1).trim();
  }
  return scope;
}

function quoted(value) {
  return '"' + value.replace(/\\/g, "\\\\").replace(/"/g, '\\"') + '"';
}

function listFilter(scope, filter) {
  const clauses = filter.trim() ? [`(${filter.trim()})`] : [];
  for (const [key, value] of Object.entries(scope)) {
    if (!/^[A-Za-z0-9_.:+-]+$/.test(key)) throw new Error(`scope key "${key}" cannot be filtered`);
    clauses.push(`scope.${key} = ${quoted(value)}`);
  }
  return clauses.join(" AND ");
}

// Banks

async function loadBanks() {
  const list = $("banks");
  list.replaceChildren();
  status("Loading banks…");
  try {
    const banks = [];
    let token = "";
    do {
      const page = await api("GET", `reasoningEngines?pageSize=100${token ? `&pageToken=${encodeURIComponent(token)}` : ""}`);
      banks.push(...(page.reasoningEngines || []));
      token = page.nextPageToken || "";
    } while (token);
    for (const bank of banks) {
      const id = shortName(bank.name);
      const button = el("button", bank.displayName ? `${bank.displayName} (${id})` : id, {
        type: "button",
        "data-testid": `bank-${id}`,
      });
      button.addEventListener("click", () => selectBank(bank));
      const item = el("li");
      item.append(button);
      list.append(item);
    }
    status(banks.length ? `${banks.length} bank(s).` : "No memory banks in this store.");
  } catch (error) {
    status(`Could not list banks: ${error.message}`, true);
  }
}

function selectBank(bank) {
  state.bank = bank;
  for (const button of $("banks").querySelectorAll("button")) {
    button.classList.toggle("selected", button.dataset.testid === `bank-${shortName(bank.name)}`);
  }
  $("bank-title").textContent = `Bank ${shortName(bank.name)}`;
  $("memories-panel").hidden = false;
  $("revisions-panel").hidden = true;
  loadMemories(true);
}

// Memories

async function loadMemories(reset) {
  if (!state.bank) return;
  if (reset) {
    state.pageToken = null;
    state.memories = [];
    state.distances = new Map();
  }
  const bankPath = relative(state.bank.name);
  try {
    const scope = parseScope($("scope").value);
    const filter = $("filter").value;
    const search = $("search").value.trim();
    status("Loading memories…");
    if (search) {
      if (!Object.keys(scope).length) throw new Error("a similarity search needs a scope");
      const body = { scope, similaritySearchParams: { searchQuery: search, topK: SEARCH_TOP_K } };
      if (filter.trim()) body.filter = filter.trim();
      const page = await api("POST", `${bankPath}/memories:retrieve`, body);
      for (const hit of page.retrievedMemories || []) {
        state.memories.push(hit.memory);
        state.distances.set(hit.memory.name, hit.distance);
      }
      state.pageToken = null;
    } else {
      const params = new URLSearchParams({ pageSize: String(PAGE_SIZE) });
      const expression = listFilter(scope, filter);
      if (expression) params.set("filter", expression);
      if (state.pageToken) params.set("pageToken", state.pageToken);
      const page = await api("GET", `${bankPath}/memories?${params}`);
      state.memories.push(...(page.memories || []));
      state.pageToken = page.nextPageToken || null;
    }
    renderMemories();
    status(`${state.memories.length} memor${state.memories.length === 1 ? "y" : "ies"}.`);
  } catch (error) {
    status(`Could not load memories: ${error.message}`, true);
  }
}

function renderMemories() {
  const holder = $("memories");
  holder.replaceChildren();
  const groups = new Map();
  for (const memory of state.memories) {
    const key = scopeText(memory.scope);
    if (!groups.has(key)) groups.set(key, []);
    groups.get(key).push(memory);
  }
  const searching = state.distances.size > 0;
  for (const key of [...groups.keys()].sort()) {
    const group = el("section", null, { class: "scope-group", "data-scope": key });
    group.append(el("h3", key, { "data-testid": "scope-heading" }));
    const table = el("table");
    const head = el("tr");
    const columns = ["Fact", "Topics", "Metadata", "Updated", "Expires"];
    if (searching) columns.push("Distance");
    for (const title of [...columns, ""]) head.append(el("th", title));
    table.append(head);
    for (const memory of groups.get(key)) {
      const id = shortName(memory.name);
      const row = el("tr", null, { "data-testid": `memory-${id}`, "data-memory": id });
      row.append(el("td", memory.fact, { class: "fact" }));
      row.append(el("td", topicsText(memory.topics)));
      row.append(el("td", metadataText(memory.metadata)));
      row.append(el("td", when(memory.updateTime)));
      row.append(el("td", when(memory.expireTime)));
      if (searching) {
        const distance = state.distances.get(memory.name);
        row.append(el("td", distance === undefined ? "—" : Number(distance).toFixed(4)));
      }
      const cell = el("td");
      const button = el("button", "Revisions", {
        type: "button",
        class: "secondary",
        "data-testid": `revisions-${id}`,
      });
      button.addEventListener("click", () => loadRevisions(memory));
      cell.append(button);
      row.append(cell);
      table.append(row);
    }
    group.append(table);
    holder.append(group);
  }
  if (!state.memories.length) holder.append(el("p", "No memories match.", { class: "subtle" }));
  $("more").hidden = !state.pageToken;
}

// Revisions

async function loadRevisions(memory) {
  const list = $("revisions");
  list.replaceChildren();
  $("revisions-panel").hidden = false;
  $("revisions-of").textContent = `${shortName(memory.name)} · ${scopeText(memory.scope)}`;
  try {
    const revisions = [];
    let token = "";
    do {
      const query = `pageSize=100${token ? `&pageToken=${encodeURIComponent(token)}` : ""}`;
      const page = await api("GET", `${relative(memory.name)}/revisions?${query}`);
      revisions.push(...(page.memoryRevisions || []));
      token = page.nextPageToken || "";
    } while (token);
    for (const revision of revisions) {
      const item = el("li", null, { "data-testid": "revision" });
      item.append(el("div", revision.fact || "(deleted)", { class: "fact" }));
      item.append(
        el(
          "div",
          `${shortName(revision.name)} · ${when(revision.createTime)} · expires ${when(revision.expireTime)}`,
          { class: "subtle" },
        ),
      );
      list.append(item);
    }
    if (!revisions.length) list.append(el("li", "No revisions.", { class: "subtle" }));
  } catch (error) {
    status(`Could not load revisions: ${error.message}`, true);
  }
}

// Wiring

function init() {
  const saved = sessionStorage.getItem(KEY_ITEM);
  if (saved) $("api-key").placeholder = "a key is in use for this tab";
  $("key-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const key = $("api-key").value.trim();
    if (key) sessionStorage.setItem(KEY_ITEM, key);
    $("api-key").value = "";
    $("api-key").placeholder = key ? "a key is in use for this tab" : $("api-key").placeholder;
    loadBanks();
  });
  $("forget-key").addEventListener("click", () => {
    sessionStorage.removeItem(KEY_ITEM);
    $("api-key").placeholder = "not needed without --keys";
    status("Key forgotten.");
  });
  $("reload-banks").addEventListener("click", loadBanks);
  $("query-form").addEventListener("submit", (event) => {
    event.preventDefault();
    loadMemories(true);
  });
  $("more").addEventListener("click", () => loadMemories(false));
  $("close-revisions").addEventListener("click", () => {
    $("revisions-panel").hidden = true;
  });
  loadBanks();
}

document.addEventListener("DOMContentLoaded", init);
