// The rag_pipeline page: ask and chat over the index with the answer streaming in (POST /chat, POST /ask), each
// citation opening the sources panel, exact answers with their operation and the documents counted, the
// conversations of this tab, uploads, and the API key (sessionStorage). Text from the server is only ever inserted
// as text (textContent, text nodes): never as HTML.
"use strict";

const KEY_STORE = "rag_pipeline.api_key";
const SESSIONS_STORE = "rag_pipeline.sessions";
const CITATION = /\[(D?\d+)\]/g;
const $ = (id) => document.getElementById(id);
let sessionId = null;
let busy = false;

// --- DOM helpers: strings become text nodes ---------------------------------------------------------------------
function el(tag, attributes, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes || {})) {
    if (name === "class") node.className = value;
    else node.setAttribute(name, value);
  }
  node.append(...children.filter((child) => child !== null && child !== undefined));
  return node;
}

function say(text) { $("status").textContent = text; }

// --- the API key ------------------------------------------------------------------------------------------------
function authHeaders(extra) {
  const headers = Object.assign({}, extra);
  const key = sessionStorage.getItem(KEY_STORE);
  if (key) headers.Authorization = "Bearer " + key;
  return headers;
}

function askForKey(message) {
  $("key-section").hidden = false;
  say(message);
  $("api-key").focus();
}

async function errorMessage(response) {
  let message = `${response.status} ${response.statusText}`;
  try {
    const body = await response.json();
    if (body && body.error && body.error.message) message = body.error.message;
  } catch (ignored) { /* not JSON */ }
  if (response.status === 401 || response.status === 403) askForKey(message);
  return message;
}

async function api(method, path, body) {
  const options = { method, headers: authHeaders(body === undefined ? {} : { "Content-Type": "application/json" }) };
  if (body !== undefined) options.body = JSON.stringify(body);
  const response = await fetch(path, options);
  if (!response.ok) throw new Error(await errorMessage(response));
  return response.json();
}

// --- server-sent events over fetch (EventSource cannot POST) ----------------------------------------------------
async function* serverEvents(response) {
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value.replace(/\r\n/g, "\n");
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      let name = "message";
      let data = "";
      for (const line of block.split("\n")) {
        if (line.startsWith("event:")) name = line.slice(6).trim();
        else if (line.startsWith("data:")) data += line.slice(5).trim();
      }
      if (data) yield [name, JSON.parse(data)];
    }
  }
}

// --- citations and the sources panel ----------------------------------------------------------------------------
function citationKey(citation) { return String(citation.label || citation.number); }

// What a citation names: an upload's name as its client gave it, else its path.
function citedName(citation) { return citation.upload_name || citation.path || ""; }

function where(citation) {
  const parts = [];
  if (citation.heading) parts.push(citation.heading);
  if (citation.page) parts.push("page " + citation.page);
  if (citation.line_start) parts.push("line " + citation.line_start);
  return parts.join(", ");
}

function citeButton(key, citations) {
  const button = el("button", { type: "button", class: "cite", "aria-label": `source ${key}` }, `[${key}]`);
  button.addEventListener("click", () => showSources(citations, key));
  return button;
}

// The answer's text with each known citation [n] / [Dn] as a button that opens the sources panel.
function renderAnswer(container, text, citations) {
  const known = new Set(citations.map(citationKey));
  container.replaceChildren();
  let last = 0;
  for (const match of text.matchAll(CITATION)) {
    container.append(text.slice(last, match.index));
    container.append(known.has(match[1]) ? citeButton(match[1], citations) : match[0]);
    last = match.index + match[0].length;
  }
  container.append(text.slice(last));
}

function showSources(citations, focusKey) {
  const list = $("sources");
  list.replaceChildren();
  let focused = null;
  for (const citation of citations) {
    const key = citationKey(citation);
    const details = [];
    if (citation.upload_name) details.push(el("p", { class: "where" }, "uploaded, stored as " + citation.path));
    if (where(citation)) details.push(el("p", { class: "where" }, where(citation)));
    if (typeof citation.score === "number") details.push(el("p", { class: "score" }, "score " + citation.score.toFixed(3)));
    if (citation.text) details.push(el("blockquote", {}, citation.text));
    if (citation.kind === "document") details.push(el("p", { class: "where" }, "a document the exact answer counted"));
    const heading = el("h3", {}, `[${key}] `, citedName(citation));
    const item = el("li", { tabindex: "-1", "data-key": key }, heading, ...details);
    if (key === focusKey) { item.classList.add("focused"); focused = item; }
    list.append(item);
  }
  const panel = $("sources-panel");
  panel.hidden = false;
  (focused || panel).focus();
  if (focused) focused.scrollIntoView({ block: "nearest" });
}

// --- turns --------------------------------------------------------------------------------------------------------
function addTurn(question) {
  const answer = el("div", { class: "answer", "aria-live": "polite", "aria-busy": "true" });
  const exact = el("ul", { class: "exact", "aria-label": "exact answers" });
  const sources = el("p", { class: "turn-sources" });
  const item = el("li", { class: "turn" }, el("p", { class: "question" }, question), exact, answer, sources);
  $("turns").append(item);
  item.scrollIntoView({ block: "end" });
  return { answer, exact, sources };
}

function showExact(turn, trajectory, citations) {
  const documents = citations.filter((citation) => citation.kind === "document");
  for (const step of trajectory || []) {
    if (step.tool !== "query_metadata") continue;
    const args = step.args || {};
    const what = [args.op, args.field || args.by, args.where ? JSON.stringify(args.where) : ""].filter(Boolean);
    turn.exact.append(el("li", {}, el("strong", {}, "Exact answer: "), what.join(" "), " — ", step.summary || ""));
  }
  if (documents.length) {
    turn.exact.append(el("li", {}, "Documents counted: ",
      ...documents.flatMap((citation) => [
        citeButton(citationKey(citation), citations), " ", citedName(citation), " "])));
  }
}

function finishTurn(turn, text, citations, trajectory) {
  renderAnswer(turn.answer, text, citations);
  turn.answer.setAttribute("aria-busy", "false");
  showExact(turn, trajectory, citations);
  if (citations.length) {
    turn.sources.replaceChildren("Sources: ", ...citations.flatMap((citation) => [
      citeButton(citationKey(citation), citations), " " + citedName(citation) + " "]));
  }
}

// /ask's done object: its cited sources as citations.
function askCitations(done) {
  const cited = new Set(done.citations);
  return done.sources.filter((source) => cited.has(source.number)).map((source) => ({
    kind: "passage", number: source.number, path: source.path, upload_name: source.upload_name,
    heading: source.heading, page: source.page, line_start: source.line_start, score: source.score,
    text: source.text }));
}

async function send(question, mode) {
  const turn = addTurn(question);
  say("Answering…");
  const body = mode === "ask" ? { question } : { message: question };
  if (mode === "chat" && sessionId) body.session_id = sessionId;
  const response = await fetch(mode === "ask" ? "ask" : "chat", {
    method: "POST", headers: authHeaders({ "Content-Type": "application/json", Accept: "text/event-stream" }),
    body: JSON.stringify(body) });
  if (!response.ok) {
    const message = await errorMessage(response);
    turn.answer.textContent = message;
    turn.answer.setAttribute("aria-busy", "false");
    turn.answer.classList.add("error");
    return;
  }
  for await (const [name, data] of serverEvents(response)) {
    if (name === "session" && data.session_id !== sessionId) {
      sessionId = data.session_id;
      remember(sessionId, question);
    } else if (name === "token") {
      turn.answer.append(data.text);
    } else if (name === "step" && data.tool === "query_metadata") {
      say("Counting over the documents' fields…");
    } else if (name === "done") {
      const citations = mode === "ask" ? askCitations(data) : data.citations;
      finishTurn(turn, data.answer, citations, data.trajectory);
    } else if (name === "error") {
      turn.answer.append(" — " + data.message);
      turn.answer.classList.add("error");
    }
  }
  say("Answered.");
}

// --- conversations (this tab's) -----------------------------------------------------------------------------------
function sessions() { return JSON.parse(sessionStorage.getItem(SESSIONS_STORE) || "[]"); }

function remember(id, title) {
  const list = sessions().filter((entry) => entry.id !== id);
  list.unshift({ id, title: title.slice(0, 80) });
  sessionStorage.setItem(SESSIONS_STORE, JSON.stringify(list));
  showConversations();
}

function showConversations() {
  const list = sessions();
  $("no-conversations").hidden = list.length > 0;
  $("conversations").replaceChildren(...list.map((entry) => {
    const button = el("button", { type: "button" }, entry.title);
    if (entry.id === sessionId) button.setAttribute("aria-current", "true");
    button.addEventListener("click", () => openConversation(entry.id));
    return el("li", {}, button);
  }));
}

async function openConversation(id) {
  try {
    const session = await api("GET", "chat/" + encodeURIComponent(id));
    sessionId = id;
    $("turns").replaceChildren();
    for (const saved of session.turns) {
      const turn = addTurn(saved.message);
      finishTurn(turn, saved.answer, saved.citations || [], saved.trajectory);
    }
    showConversations();
    say("Conversation opened.");
    $("message").focus();
  } catch (error) {
    say(error.message);
  }
}

function newConversation() {
  sessionId = null;
  $("turns").replaceChildren();
  $("sources-panel").hidden = true;
  showConversations();
  say("New conversation.");
  $("message").focus();
}

// --- uploads ------------------------------------------------------------------------------------------------------
async function loadUploadSources() {
  try {
    const body = await api("GET", "sources");
    const uploads = body.sources.filter((source) => source.kind === "uploads");
    $("upload-source").replaceChildren(...uploads.map((source) => el("option", { value: source.name }, source.name)));
    $("upload-section").hidden = uploads.length === 0;
  } catch (error) {
    $("upload-section").hidden = true;
  }
}

async function upload(event) {
  event.preventDefault();
  const source = $("upload-source").value;
  const form = new FormData();
  for (const file of $("upload-files").files) form.append("files", file, file.name);
  const status = $("upload-status");
  status.textContent = "Uploading…";
  const response = await fetch(`sources/${encodeURIComponent(source)}/documents`,
    { method: "POST", headers: authHeaders({}), body: form });
  if (!response.ok) { status.textContent = await errorMessage(response); return; }
  const result = await response.json();
  const stored = result.documents.map((document) => document.upload_name || document.filename || document.path)
    .join(", ");
  const rejected = result.rejected.map((file) => `${file.filename}: ${file.error.message}`).join("; ");
  status.textContent = `Stored ${result.documents.length}: ${stored}.` + (rejected ? ` Refused: ${rejected}.` : "") +
    (result.ingest ? " Ingesting…" : "");
  if (result.ingest) followIngest(result.ingest.id, status);
}

async function followIngest(id, status) {
  for (;;) {
    await new Promise((resolve) => setTimeout(resolve, 1000));
    let job;
    try { job = await api("GET", "ingest/" + encodeURIComponent(id)); } catch (error) { status.textContent = error.message; return; }
    if (job.status !== "running" && job.status !== "queued") {
      status.textContent += ` Ingest ${job.status}.` + (job.error ? " " + job.error : "");
      return;
    }
  }
}

// --- start --------------------------------------------------------------------------------------------------------
async function probe() {
  const response = await fetch("fields", { headers: authHeaders({}) });
  if (response.ok) {
    if (sessionStorage.getItem(KEY_STORE)) $("key-section").hidden = false;
    say("");
    loadUploadSources();
  } else {
    say(await errorMessage(response));
  }
}

document.addEventListener("DOMContentLoaded", () => {
  $("ask-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    const question = $("message").value.trim();
    if (!question || busy) return;
    busy = true;
    $("send").disabled = true;
    $("message").value = "";
    try {
      await send(question, document.querySelector("input[name=mode]:checked").value);
    } catch (error) {
      say(error.message);
    } finally {
      busy = false;
      $("send").disabled = false;
      $("message").focus();
    }
  });
  $("message").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey) { event.preventDefault(); $("ask-form").requestSubmit(); }
  });
  $("key-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const key = $("api-key").value.trim();
    if (key) sessionStorage.setItem(KEY_STORE, key);
    $("api-key").value = "";
    probe();
    $("message").focus();
  });
  $("forget-key").addEventListener("click", () => { sessionStorage.removeItem(KEY_STORE); say("Key forgotten."); });
  $("new-chat").addEventListener("click", newConversation);
  $("close-sources").addEventListener("click", () => { $("sources-panel").hidden = true; $("message").focus(); });
  document.addEventListener("keydown", (event) => {
    if (event.key === "Escape" && !$("sources-panel").hidden) { $("sources-panel").hidden = true; $("message").focus(); }
  });
  $("upload-form").addEventListener("submit", upload);
  showConversations();
  probe();
});
