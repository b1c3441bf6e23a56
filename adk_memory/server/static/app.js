// adk-memory memory browser: banks, memories by scope (topics, metadata, expiry), revisions, and
// the changes a key may make: create, edit a fact, delete, roll back to a revision, purge.
// It calls only the server's public REST API (/v1beta1/…) with the key typed in the page, which is
// kept in sessionStorage only. Every text from the store is written with textContent, never as
// HTML. The URL holds what is shown (?bank=…&scope=…&filter=…&q=…&memory=…), never the key.
"use strict";

const API = "/v1beta1/";
const KEY_ITEM = "adk-memory-api-key";
const PAGE_SIZE = 50;
const SEARCH_TOP_K = 50;
// Not a valid memory id (uppercase, underscore): the permission probes below name it, so that
// no probe can reach a memory whatever the server does with it.
const PROBE_ID = "_PERMISSION_PROBE";

const state = {
  banks: [],
  bank: null,
  caps: null, // what the key may do on the bank: create, update, delete, rollback, revisions, search
  capsCache: new Map(), // bank name -> caps, for the key in use
  applied: { scope: "", filter: "", search: "" }, // the query of the memories shown
  pageToken: null,
  memories: [],
  distances: new Map(),
  open: null, // { id, memory, live, revisions } of the revisions panel
  confirm: null, // the pending confirmation: { action, resolve }
  memoryDialog: null, // { mode: "create" } or { mode: "edit", memory }
};

const $ = (id) => document.getElementById(id);

function el(tag, text, attributes) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  for (const [name, value] of Object.entries(attributes || {})) node.setAttribute(name, value);
  return node;
}

function button(text, attributes, onClick) {
  const node = el("button", text, { type: "button", ...attributes });
  node.addEventListener("click", onClick);
  return node;
}

function status(message, isError) {
  const line = $("status");
  line.textContent = message || "";
  line.className = isError ? "error" : "";
}

class ApiError extends Error {
  constructor(code, statusName, message) {
    super(`${statusName ? `${code} ${statusName}` : code}: ${message}`);
    this.code = code;
    this.statusName = statusName;
  }
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
    throw new ApiError(response.status, error.status, error.message || response.statusText);
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

function bankPath() {
  return relative(state.bank.name);
}

function memoryPath(id) {
  return `${bankPath()}/memories/${encodeURIComponent(id)}`;
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

function topicNames(topics) {
  return (topics || [])
    .map((topic) => topic.managedMemoryTopic || topic.customMemoryTopicLabel || "")
    .filter(Boolean);
}

function metadataEntries(metadata) {
  return Object.entries(metadata || {}).map(([key, value]) => {
    const shown = ["stringValue", "doubleValue", "boolValue", "timestampValue"]
      .map((field) => value[field])
      .find((item) => item !== undefined);
    return `${key}=${shown}`;
  });
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

function ttlOf(text) {
  // "30d", "12h", "90m", "3600s" or "3600" as the API's duration ("2592000s").
  const found = /^(\d+)\s*([dhms]?)$/.exec(text.trim().toLowerCase());
  if (!found) throw new Error(`"${text}" is not a duration: use e.g. 30d, 12h, 90m or 3600s`);
  const unit = { d: 86400, h: 3600, m: 60, s: 1, "": 1 }[found[2]];
  return `${Number(found[1]) * unit}s`;
}

// Deep links: what is shown lives in the URL, so that it can be bookmarked and shared.

function readLocation() {
  const params = new URLSearchParams(location.search);
  return {
    bank: params.get("bank") || "",
    scope: params.get("scope") || "",
    filter: params.get("filter") || "",
    search: params.get("q") || "",
    memory: params.get("memory") || "",
  };
}

function linkTo(memoryId) {
  const params = new URLSearchParams();
  if (state.bank) params.set("bank", shortName(state.bank.name));
  if (state.applied.scope) params.set("scope", state.applied.scope);
  if (state.applied.filter) params.set("filter", state.applied.filter);
  if (state.applied.search) params.set("q", state.applied.search);
  if (memoryId) params.set("memory", memoryId);
  const query = params.toString();
  return location.pathname + (query ? `?${query}` : "");
}

function writeLocation() {
  const target = linkTo(state.open ? state.open.id : "");
  if (target !== location.pathname + location.search) history.pushState(null, "", target);
}

// Permissions: each action the key may not take is left out of the page.

async function probeCaps(path) {
  // Each request names an action with an invalid memory id or an empty body: the server checks
  // the key's permission first (403 without it) and then refuses the request itself (400/404).
  const memory = `${path}/memories/${PROBE_ID}`;
  const probes = {
    create: ["POST", `${path}/memories`, {}],
    update: ["PATCH", memory, {}],
    delete: ["DELETE", memory, undefined],
    rollback: ["POST", `${memory}:rollback`, {}],
    revisions: ["GET", `${memory}/revisions`, undefined],
    search: ["POST", `${path}/memories:retrieve`, {}],
  };
  const caps = {};
  await Promise.all(
    Object.entries(probes).map(async ([cap, [method, target, body]]) => {
      try {
        await api(method, target, body);
        caps[cap] = true;
      } catch (error) {
        caps[cap] = !(error instanceof ApiError && error.code === 403);
      }
    }),
  );
  return caps;
}

function may(cap) {
  return Boolean(state.caps && state.caps[cap]);
}

function refused(error, cap) {
  // A 403 for a permission the key lacks (changed since the probe): hide that action from now on.
  if (error instanceof ApiError && error.code === 403 && /lacks the permission/.test(error.message)) {
    if (state.caps) state.caps[cap] = false;
    renderActions();
    renderMemories();
    renderRevisions();
  }
}

function renderActions() {
  $("new-memory").hidden = !may("create");
  $("purge").hidden = !may("delete");
  $("search").closest("label").hidden = state.caps !== null && !may("search");
}

// Banks

async function loadBanks() {
  const list = $("banks");
  list.replaceChildren();
  state.banks = [];
  status("Loading banks…");
  try {
    let token = "";
    do {
      const query = `pageSize=100${token ? `&pageToken=${encodeURIComponent(token)}` : ""}`;
      const page = await api("GET", `reasoningEngines?${query}`);
      state.banks.push(...(page.reasoningEngines || []));
      token = page.nextPageToken || "";
    } while (token);
    for (const bank of state.banks) {
      const id = shortName(bank.name);
      const item = el("li");
      const entry = button(
        bank.displayName || id,
        { class: "bank", "data-testid": `bank-${id}`, "data-bank": id },
        () => {
          closeRevisions(false);
          selectBank(bank, true);
        },
      );
      if (bank.displayName) entry.append(el("span", id, { class: "bank-id" }));
      item.append(entry);
      list.append(item);
    }
    status(state.banks.length ? `${state.banks.length} bank(s).` : "No memory banks in this store.");
    await applyLocation();
  } catch (error) {
    status(`Could not list banks: ${error.message}`, true);
  }
}

async function applyLocation() {
  const link = readLocation();
  $("scope").value = link.scope;
  $("filter").value = link.filter;
  $("search").value = link.search;
  if (!link.bank) {
    state.bank = null;
    markBank();
    $("memories-panel").hidden = true;
    closeRevisions(false);
    return;
  }
  const bank = state.banks.find((candidate) => shortName(candidate.name) === link.bank);
  if (!bank) {
    status(`The bank "${link.bank}" does not exist or this key may not use it.`, true);
    return;
  }
  await selectBank(bank, false);
  if (link.memory) await openMemory(link.memory, false);
  else closeRevisions(false);
}

function markBank() {
  const selected = state.bank ? shortName(state.bank.name) : null;
  for (const node of $("banks").querySelectorAll("button.bank")) {
    if (node.dataset.bank === selected) node.setAttribute("aria-current", "true");
    else node.removeAttribute("aria-current");
  }
}

async function selectBank(bank, push) {
  if (!state.bank || state.bank.name !== bank.name) state.caps = null;
  state.bank = bank;
  markBank();
  $("bank-title").textContent = bank.displayName
    ? `${bank.displayName} (${shortName(bank.name)})`
    : `Bank ${shortName(bank.name)}`;
  $("memories-panel").hidden = false;
  renderActions();
  const caps = state.capsCache.get(bank.name) || probeCaps(bankPath());
  state.capsCache.set(bank.name, caps);
  readQuery();
  const loaded = loadMemories(true, push);
  const known = await caps;
  if (state.bank === bank) {
    state.caps = known;
    renderActions();
    renderMemories();
  }
  await loaded;
}

// Memories

function readQuery() {
  state.applied = {
    scope: $("scope").value.trim(),
    filter: $("filter").value.trim(),
    search: $("search").value.trim(),
  };
}

async function loadMemories(reset, push) {
  if (!state.bank) return;
  if (reset) {
    state.pageToken = null;
    state.memories = [];
    state.distances = new Map();
    if (push) writeLocation();
  }
  const { scope: scopeInput, filter, search } = state.applied;
  try {
    const scope = parseScope(scopeInput);
    status("Loading memories…");
    if (search) {
      if (!Object.keys(scope).length) throw new Error("a similarity search needs a scope");
      const body = { scope, similaritySearchParams: { searchQuery: search, topK: SEARCH_TOP_K } };
      if (filter) body.filter = filter;
      const page = await api("POST", `${bankPath()}/memories:retrieve`, body);
      state.memories = [];
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
      const page = await api("GET", `${bankPath()}/memories?${params}`);
      state.memories.push(...(page.memories || []));
      state.pageToken = page.nextPageToken || null;
    }
    renderMemories();
    status(`${state.memories.length} memor${state.memories.length === 1 ? "y" : "ies"}.`);
  } catch (error) {
    renderMemories();
    status(`Could not load memories: ${error.message}`, true);
  }
}

function cell(label, parts, chipClass) {
  // A cell of entries (topics, metadata, a date and its time), each kept whole on one line:
  // lines break between entries, never inside one.
  const node = el("td", null, { "data-label": label });
  if (!parts.length) {
    node.textContent = "—";
    node.classList.add("empty"); // left out of a card
  }
  parts.forEach((part, index) => {
    if (index) node.append(" ");
    node.append(el("span", part, { class: chipClass || "whole" }));
  });
  return node;
}

function whenParts(value) {
  return value ? when(value).split(/ (?=\d\d:)/) : [];
}

function renderMemories() {
  // One table, so that every scope's rows share the columns; a tbody per scope, headed by it.
  const holder = $("memories");
  holder.replaceChildren();
  $("more").hidden = !state.pageToken;
  if (!state.memories.length) {
    holder.append(el("p", "No memories match.", { class: "subtle" }));
    return;
  }
  const groups = new Map();
  for (const memory of state.memories) {
    const key = scopeText(memory.scope);
    if (!groups.has(key)) groups.set(key, []);
    groups.get(key).push(memory);
  }
  const searching = state.distances.size > 0;
  const openId = state.open ? state.open.id : null;
  const table = el("table");
  const columns = ["Fact", "Topics", "Metadata", "Updated", "Expires"];
  if (searching) columns.push("Distance");
  const headRow = el("tr");
  for (const title of columns) headRow.append(el("th", title, { scope: "col" }));
  headRow.append(el("th", null, { scope: "col", "aria-label": "Actions" }));
  const head = el("thead");
  head.append(headRow);
  table.append(head);
  for (const key of [...groups.keys()].sort()) {
    const body = el("tbody", null, { class: "scope-group", "data-scope": key });
    const headingRow = el("tr", null, { class: "scope-row" });
    headingRow.append(
      el("th", key, { colspan: String(columns.length + 1), scope: "rowgroup", "data-testid": "scope-heading" }),
    );
    body.append(headingRow);
    for (const memory of groups.get(key)) body.append(memoryRow(memory, searching, openId));
    table.append(body);
  }
  const frame = el("div", null, { class: "table-frame" });
  frame.append(table);
  holder.append(frame);
}

function memoryRow(memory, searching, openId) {
  const id = shortName(memory.name);
  const row = el("tr", null, { "data-testid": `memory-${id}`, "data-memory": id });
  if (id === openId) row.classList.add("open");
  const fact = el("td", null, { class: "fact", "data-label": "Fact" });
  fact.append(el("span", memory.fact, { class: "fact-text" }));
  const link = el("a", id, { href: linkTo(id), class: "memory-id", title: "Link to this memory" });
  link.addEventListener("click", (event) => {
    event.preventDefault();
    openMemory(id, true);
  });
  fact.append(link);
  row.append(fact);
  row.append(cell("Topics", topicNames(memory.topics), "chip"));
  row.append(cell("Metadata", metadataEntries(memory.metadata)));
  row.append(cell("Updated", whenParts(memory.updateTime)));
  row.append(cell("Expires", whenParts(memory.expireTime)));
  if (searching) {
    const distance = state.distances.get(memory.name);
    row.append(cell("Distance", distance === undefined ? [] : [Number(distance).toFixed(4)]));
  }
  const actionCell = el("td", null, { class: "actions" });
  const actions = el("div", null, { class: "row-actions" });
  actionCell.append(actions);
  if (may("revisions")) {
    actions.append(
      button("Revisions", { class: "secondary", "data-testid": `revisions-${id}` }, () =>
        openMemory(id, true),
      ),
    );
  }
  if (may("update")) {
    actions.append(
      button("Edit", { class: "secondary", "data-testid": `edit-${id}` }, () => editMemory(memory)),
    );
  }
  if (may("delete")) {
    actions.append(
      button("Delete", { class: "danger-outline", "data-testid": `delete-${id}` }, () =>
        deleteMemory(memory),
      ),
    );
  }
  row.append(actionCell);
  return row;
}

// Revisions

async function openMemory(id, push) {
  let memory = state.memories.find((candidate) => shortName(candidate.name) === id);
  let live = true;
  if (!memory) {
    try {
      memory = await api("GET", memoryPath(id));
    } catch (error) {
      if (!(error instanceof ApiError) || error.code !== 404) {
        status(`Could not open memory ${id}: ${error.message}`, true);
        return;
      }
      // Deleted (or expired): its revisions may remain, to restore it from.
      memory = { name: `${state.bank.name}/memories/${id}` };
      live = false;
    }
  }
  state.open = { id, memory, live, revisions: null };
  if (push) writeLocation();
  highlightOpen();
  const row = $("memories").querySelector(`tr[data-memory="${CSS.escape(id)}"]`);
  if (row && !push) row.scrollIntoView({ block: "nearest" });
  await loadRevisions();
}

function highlightOpen() {
  const openId = state.open ? state.open.id : null;
  for (const row of $("memories").querySelectorAll("tr[data-memory]")) {
    row.classList.toggle("open", row.dataset.memory === openId);
  }
}

function closeRevisions(push) {
  state.open = null;
  $("revisions-panel").hidden = true;
  $("layout").classList.remove("with-revisions");
  highlightOpen();
  if (push) writeLocation();
}

async function loadRevisions() {
  const open = state.open;
  if (!open) return;
  $("revisions-panel").hidden = false;
  $("layout").classList.add("with-revisions");
  const scope = scopeText(open.memory.scope);
  $("revisions-of").textContent = [open.id, scope, open.live ? "" : "deleted"]
    .filter(Boolean)
    .join(" · ");
  $("revisions").replaceChildren(el("li", "Loading…", { class: "subtle" }));
  if (!may("revisions") && state.caps !== null) {
    $("revisions").replaceChildren(
      el("li", "This key may not list revisions (memoryRevisions.list).", { class: "subtle" }),
    );
    return;
  }
  try {
    const revisions = [];
    let token = "";
    do {
      const query = `pageSize=100${token ? `&pageToken=${encodeURIComponent(token)}` : ""}`;
      const page = await api("GET", `${memoryPath(open.id)}/revisions?${query}`);
      revisions.push(...(page.memoryRevisions || []));
      token = page.nextPageToken || "";
    } while (token);
    if (state.open !== open) return;
    open.revisions = revisions;
    renderRevisions();
  } catch (error) {
    if (state.open !== open) return;
    $("revisions").replaceChildren();
    status(`Could not load revisions: ${error.message}`, true);
  }
}

function renderRevisions() {
  const open = state.open;
  if (!open || !open.revisions) return;
  const list = $("revisions");
  list.replaceChildren();
  open.revisions.forEach((revision, index) => {
    const revisionId = shortName(revision.name);
    const item = el("li", null, { "data-testid": "revision", "data-revision": revisionId });
    item.append(el("div", revision.fact || "(no fact)", { class: "fact" }));
    const meta = el("div", null, { class: "subtle" });
    const saved = [...whenParts(revision.createTime), "· kept until", ...whenParts(revision.expireTime)];
    saved.forEach((part, at) => {
      if (at) meta.append(" ");
      meta.append(el("span", part, { class: "whole" }));
    });
    item.append(meta);
    const current = open.live && index === 0;
    if (current) item.append(el("div", "current", { class: "badge" }));
    else if (may("rollback")) {
      item.append(
        button(
          open.live ? "Roll back to this" : "Restore this",
          { class: "secondary", "data-testid": `rollback-${index}` },
          () => rollback(open, revision),
        ),
      );
    }
    list.append(item);
  });
  if (!open.revisions.length) list.append(el("li", "No revisions.", { class: "subtle" }));
}

// Changes

function openMemoryDialog(mode, memory) {
  state.memoryDialog = { mode, memory };
  const creating = mode === "create";
  $("memory-dialog-title").textContent = creating ? "New memory" : `Edit memory ${shortName(memory.name)}`;
  $("memory-scope").value = creating ? state.applied.scope : scopeText(memory.scope);
  $("memory-scope").disabled = !creating; // a memory's scope is immutable
  $("memory-fact").value = creating ? "" : memory.fact || "";
  $("memory-id").value = "";
  $("memory-ttl").value = "";
  $("create-only").hidden = !creating;
  $("memory-save").textContent = creating ? "Create" : "Save";
  $("memory-save").disabled = false;
  $("memory-dialog").querySelector(".dialog-error").textContent = "";
  $("memory-dialog").showModal();
  (creating && !$("memory-scope").value ? $("memory-scope") : $("memory-fact")).focus();
}

function editMemory(memory) {
  openMemoryDialog("edit", memory);
}

async function saveMemory() {
  const pending = state.memoryDialog;
  const error = $("memory-dialog").querySelector(".dialog-error");
  const fact = $("memory-fact").value.trim();
  error.textContent = "";
  if (!fact) {
    error.textContent = "Write the fact.";
    return;
  }
  $("memory-save").disabled = true;
  try {
    if (pending.mode === "create") {
      const scope = parseScope($("memory-scope").value);
      if (!Object.keys(scope).length) throw new Error("a memory needs a scope, e.g. user_id=123");
      const body = { fact, scope };
      if ($("memory-ttl").value.trim()) body.ttl = ttlOf($("memory-ttl").value);
      const id = $("memory-id").value.trim();
      const query = id ? `?memoryId=${encodeURIComponent(id)}` : "";
      const operation = await api("POST", `${bankPath()}/memories${query}`, body);
      const created = operation.response ? shortName(operation.response.name) : id;
      $("memory-dialog").close();
      await refresh(null);
      const shown = state.memories.some((memory) => shortName(memory.name) === created);
      status(`Created memory ${created}${shown ? "" : " (not shown: outside the scope or filter)"}.`);
      flash(created);
    } else {
      const id = shortName(pending.memory.name);
      await api("PATCH", `${memoryPath(id)}?updateMask=fact`, { fact });
      $("memory-dialog").close();
      await refresh(id);
      status(`Saved the fact of memory ${id}.`);
      flash(id);
    }
  } catch (failure) {
    refused(failure, pending.mode === "create" ? "create" : "update");
    error.textContent = failure.message;
    $("memory-save").disabled = false;
  }
}

async function refresh(id) {
  // Reloads the memories shown (all pages loaded so far) and the open revisions.
  const pages = Math.max(1, Math.ceil(state.memories.length / PAGE_SIZE));
  await loadMemories(true, false);
  for (let page = 1; page < pages && state.pageToken; page += 1) await loadMemories(false);
  if (state.open && (!id || state.open.id === id)) {
    const current = state.memories.find((memory) => shortName(memory.name) === state.open.id);
    if (current) state.open.memory = current;
    await loadRevisions();
  }
}

function flash(id) {
  const row = $("memories").querySelector(`tr[data-memory="${CSS.escape(id)}"]`);
  if (!row) return;
  row.classList.add("changed");
  row.scrollIntoView({ block: "nearest" });
  setTimeout(() => row.classList.remove("changed"), 2000);
}

function confirmAction({ title, text, detail, okLabel, okDisabled, action }) {
  const dialog = $("confirm-dialog");
  $("confirm-title").textContent = title;
  updateConfirm({ text, detail, okLabel, okDisabled });
  dialog.querySelector(".dialog-error").textContent = "";
  dialog.showModal();
  dialog.querySelector("[data-close]").focus();
  return new Promise((resolve) => {
    state.confirm = { action, resolve };
  });
}

function updateConfirm({ text, detail, okLabel, okDisabled }) {
  $("confirm-text").textContent = text;
  $("confirm-detail").textContent = detail || "";
  $("confirm-detail").hidden = !detail;
  $("confirm-ok").textContent = okLabel || "OK";
  $("confirm-ok").hidden = okLabel === null;
  $("confirm-ok").disabled = Boolean(okDisabled);
}

function settleConfirm(result) {
  const pending = state.confirm;
  state.confirm = null;
  if ($("confirm-dialog").open) $("confirm-dialog").close();
  if (pending) pending.resolve(result);
}

async function deleteMemory(memory) {
  const id = shortName(memory.name);
  await confirmAction({
    title: `Delete memory ${id}?`,
    text:
      `Its fact, in scope ${scopeText(memory.scope)}, will no longer be retrieved. Its ` +
      "revisions are kept until they expire, so it can be restored from them.",
    detail: memory.fact,
    okLabel: "Delete",
    action: async () => {
      try {
        await api("DELETE", memoryPath(id));
      } catch (error) {
        refused(error, "delete");
        throw error;
      }
      if (state.open && state.open.id === id) state.open.live = false;
      await refresh(id);
      status(`Deleted memory ${id}.`);
    },
  });
}

async function rollback(open, revision) {
  const revisionId = shortName(revision.name);
  await confirmAction({
    title: open.live ? `Roll back memory ${open.id}?` : `Restore memory ${open.id}?`,
    text: open.live
      ? `Its fact becomes the one of the revision from ${when(revision.createTime)}:`
      : `It is recreated with the fact of the revision from ${when(revision.createTime)}:`,
    detail: revision.fact,
    okLabel: open.live ? "Roll back" : "Restore",
    action: async () => {
      try {
        await api("POST", `${memoryPath(open.id)}:rollback`, { targetRevisionId: revisionId });
      } catch (error) {
        refused(error, "rollback");
        throw error;
      }
      open.live = true;
      await refresh(open.id);
      status(`Memory ${open.id} is back at the revision from ${when(revision.createTime)}.`);
      flash(open.id);
    },
  });
}

async function purge() {
  let expression;
  try {
    expression = listFilter(parseScope(state.applied.scope), state.applied.filter);
  } catch (error) {
    status(error.message, true);
    return;
  }
  if (!expression) {
    status("Purging needs a scope or a filter: set one and press Show first.", true);
    return;
  }
  const path = `${bankPath()}/memories:purge`;
  const confirmed = confirmAction({
    title: `Purge memories from ${shortName(state.bank.name)}?`,
    text: "Counting the memories this filter selects…",
    detail: expression,
    okLabel: "Delete",
    okDisabled: true,
    action: async () => {
      let operation;
      try {
        operation = await api("POST", path, { filter: expression, force: true });
      } catch (error) {
        refused(error, "delete");
        throw error;
      }
      const purged = Number((operation.response || {}).purgeCount || 0);
      await refresh(null);
      status(`Purged ${purged} memor${purged === 1 ? "y" : "ies"}.`);
    },
  });
  try {
    const operation = await api("POST", path, { filter: expression, force: false });
    const count = Number((operation.response || {}).purgeCount || 0);
    if (!state.confirm) return;
    const many = count === 1 ? "memory matches" : "memories match";
    updateConfirm({
      text: count
        ? `${count} ${many} this filter, including any not loaded on this page. ` +
          "They will be deleted."
        : "No memory matches this filter: nothing to purge.",
      detail: expression,
      okLabel: count ? `Delete ${count} ${count === 1 ? "memory" : "memories"}` : null,
      okDisabled: !count,
    });
  } catch (error) {
    refused(error, "delete");
    if (state.confirm) {
      updateConfirm({ text: `Could not count: ${error.message}`, detail: expression, okLabel: null });
    }
  }
  await confirmed;
}

// Wiring

function forgetKey() {
  sessionStorage.removeItem(KEY_ITEM);
  state.capsCache.clear();
  state.caps = null;
  state.bank = null;
  state.banks = [];
  state.memories = [];
  $("banks").replaceChildren();
  $("memories-panel").hidden = true;
  closeRevisions(false);
  $("api-key").placeholder = "not needed without --keys";
}

function init() {
  const saved = sessionStorage.getItem(KEY_ITEM);
  if (saved) $("api-key").placeholder = "in use for this tab";
  $("key-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const key = $("api-key").value.trim();
    if (key) {
      sessionStorage.setItem(KEY_ITEM, key);
      state.capsCache.clear();
      state.caps = null;
    }
    $("api-key").value = "";
    if (key) $("api-key").placeholder = "in use for this tab";
    loadBanks();
  });
  $("forget-key").addEventListener("click", () => {
    forgetKey();
    status("Key forgotten.");
  });
  $("reload-banks").addEventListener("click", loadBanks);
  $("query-form").addEventListener("submit", (event) => {
    event.preventDefault();
    closeRevisions(false);
    readQuery();
    loadMemories(true, true);
  });
  $("more").addEventListener("click", () => loadMemories(false));
  $("close-revisions").addEventListener("click", () => closeRevisions(true));
  $("new-memory").addEventListener("click", () => openMemoryDialog("create"));
  $("purge").addEventListener("click", purge);
  $("memory-form").addEventListener("submit", (event) => {
    event.preventDefault();
    saveMemory();
  });
  $("confirm-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    const pending = state.confirm;
    if (!pending || $("confirm-ok").disabled) return;
    $("confirm-ok").disabled = true;
    try {
      await pending.action();
      settleConfirm(true);
    } catch (error) {
      $("confirm-dialog").querySelector(".dialog-error").textContent = error.message;
      $("confirm-ok").disabled = false;
    }
  });
  for (const dialog of document.querySelectorAll("dialog")) {
    for (const closer of dialog.querySelectorAll("[data-close]")) {
      closer.addEventListener("click", () => dialog.close());
    }
  }
  $("confirm-dialog").addEventListener("close", () => settleConfirm(false));
  window.addEventListener("popstate", () => {
    if (state.banks.length) applyLocation();
  });
  loadBanks();
}

document.addEventListener("DOMContentLoaded", init);
