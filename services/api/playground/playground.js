// MemoryOS playground (docs/playground.md). Plain JavaScript, no dependencies, no build step.
//
// Everything the page shows comes from the public /v1 API with the key typed in the header, the same
// calls any client makes: the memory lives in the service, the page keeps nothing but the key (in
// sessionStorage, gone with the tab) and the ids typed in. Memory text is user data: it is only ever
// put in the page as text (textContent, text nodes, SVG <title> text), never parsed as HTML.
"use strict";

(() => {
  const BATCH_TURNS = 32; // turns per POST /memories/batch (the server takes up to 256): a moving bar
  const REFRESH_MS = 5000;
  const PAGE_LIST_LIMIT = 1000; // the server's maximum page size for GET /memories
  const MAX_LISTED_PAGES = 20000; // the page stops listing there, and says so
  const MAX_CHART_SEGMENTS = 40;
  const WRITE_WAIT_MS = 60000;
  const STORE = { key: "memoryos.playground.key", user: "memoryos.playground.user", assistant: "memoryos.playground.assistant" };
  const SVG_NS = "http://www.w3.org/2000/svg";

  const $ = (id) => document.getElementById(id);

  // --- DOM helpers: text only --------------------------------------------------------------------
  /** An element; string children become text nodes, so no data is ever parsed as markup. */
  function el(tag, props, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(props || {})) {
      if (value === undefined || value === null || value === false) continue;
      if (name === "class") node.className = value;
      else if (name === "text") node.textContent = String(value);
      else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
      else if (name === "dataset") Object.assign(node.dataset, value);
      else node.setAttribute(name, value === true ? "" : String(value));
    }
    append(node, children);
    return node;
  }

  function append(node, children) {
    for (const child of children.flat()) {
      if (child === undefined || child === null || child === false) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  function svg(tag, attrs, ...children) {
    const node = document.createElementNS(SVG_NS, tag);
    for (const [name, value] of Object.entries(attrs || {})) {
      if (name === "text") node.textContent = String(value);
      else if (name === "class") node.setAttribute("class", value);
      else node.setAttribute(name, String(value));
    }
    for (const child of children) if (child) node.append(child);
    return node;
  }

  function replace(node, ...children) {
    node.replaceChildren();
    return append(node, children);
  }

  const fmt = (x, digits = 2) => (typeof x === "number" && Number.isFinite(x) ? x.toFixed(digits) : "–");
  /** Heat rounded *down*: a segment a hair under the promotion threshold must not read as at it. */
  const fmtHeat = (x, digits = 2) => (typeof x === "number" && Number.isFinite(x) ? fmt(Math.floor(x * 10 ** digits + 1e-9) / 10 ** digits, digits) : "–");

  // --- state ---------------------------------------------------------------------------------------
  const state = {
    user: sessionStorage.getItem(STORE.user) || "playground",
    assistant: sessionStorage.getItem(STORE.assistant) || "default_assistant_profile",
    key: sessionStorage.getItem(STORE.key) || "",
    pages: [],
    stats: null,
    selectedSegment: null,
    refreshGeneration: 0,
    refreshing: false,
    busy: 0,
    importable: [],
  };

  // --- the API -------------------------------------------------------------------------------------
  class ApiError extends Error {
    constructor(status, code, message, field, retryAfter) {
      super(message);
      this.status = status;
      this.code = code;
      this.field = field;
      this.retryAfter = retryAfter;
    }

    describe() {
      const field = this.field ? ` (field ${this.field})` : "";
      return `${this.status} ${this.code}: ${this.message}${field}`;
    }
  }

  function spacePath(space) {
    return `users/${encodeURIComponent(space.user)}/assistants/${encodeURIComponent(space.assistant)}`;
  }

  /** A call to `/v1/<space>/<path>`; resolves to parsed JSON, a Blob (`asBlob`) or null (204). The URL
   * is relative to the page (`/playground/`), so the page works under a proxy's path prefix too. */
  async function api(method, space, path, { json, query, asBlob } = {}) {
    const url = new URL(`../v1/${spacePath(space)}${path}`, window.location.href);
    for (const [name, value] of Object.entries(query || {})) url.searchParams.set(name, value);
    const headers = { Accept: asBlob ? "application/zip" : "application/json" };
    if (state.key) headers.Authorization = `Bearer ${state.key}`;
    const init = { method, headers };
    if (json !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(json);
    }
    let response;
    try {
      response = await fetch(url, init);
    } catch (error) {
      throw new ApiError(0, "unreachable", `the server did not answer (${error.message})`, null, null);
    }
    if (!response.ok) {
      let body = {};
      try {
        body = await response.json();
      } catch {
        body = {};
      }
      const retryAfter = Number(response.headers.get("Retry-After")) || null;
      throw new ApiError(response.status, body.error || "error", body.message || response.statusText, body.field, retryAfter);
    }
    if (response.status === 204) return null;
    return asBlob ? response.blob() : response.json();
  }

  const isMissingSpace = (error) => error instanceof ApiError && error.status === 404 && error.code === "space_not_found";

  /** `api`, retried while the server says it is busy (429, 503 with Retry-After), a few times. */
  async function apiPatiently(method, space, path, options) {
    for (let attempt = 0; ; attempt++) {
      try {
        return await api(method, space, path, options);
      } catch (error) {
        const busy = error instanceof ApiError && (error.status === 429 || error.status === 503);
        if (!busy || attempt >= 5) throw error;
        await sleep(1000 * Math.min(error.retryAfter || 1, 10));
      }
    }
  }

  const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

  // --- status line -----------------------------------------------------------------------------------
  function say(message, kind = "info") {
    const status = $("status");
    status.textContent = message;
    status.className = `status ${kind}`;
  }

  function sayError(error, doing) {
    if (error instanceof ApiError && error.status === 401) {
      say(`${doing}: this server needs an API key. Type it in the header (it stays in this tab only).`, "error");
      $("api-key").focus();
    } else {
      say(`${doing}: ${error instanceof ApiError ? error.describe() : error.message}`, "error");
    }
  }

  /** Runs `work` with the action buttons disabled, so two writes from one page never interleave. */
  async function busy(work) {
    state.busy++;
    setButtons();
    try {
      return await work();
    } finally {
      state.busy--;
      setButtons();
    }
  }

  function setButtons() {
    const disabled = state.busy > 0;
    for (const id of ["consolidate", "export", "forget", "chat-send", "open-space"]) $(id).disabled = disabled;
    $("import-start").disabled = disabled || state.importable.length === 0;
  }

  // --- the space view --------------------------------------------------------------------------------
  const currentSpace = () => ({ user: state.user, assistant: state.assistant });

  async function listAllPages(space) {
    const pages = [];
    for (let offset = 0; offset < MAX_LISTED_PAGES; offset += PAGE_LIST_LIMIT) {
      const list = await api("GET", space, "/memories", { query: { offset, limit: PAGE_LIST_LIMIT } });
      pages.push(...list.pages);
      if (offset + list.pages.length >= list.total || list.pages.length === 0) return { pages, total: list.total };
    }
    return { pages, total: null };
  }

  /** Reads the whole view again; an answer that arrives after the space changed, or after a newer
   * refresh started, is dropped. */
  async function refresh() {
    const generation = ++state.refreshGeneration;
    const space = currentSpace();
    state.refreshing = true;
    try {
      let stats;
      try {
        stats = await api("GET", space, "/stats");
      } catch (error) {
        if (!isMissingSpace(error)) throw error;
        if (generation === state.refreshGeneration) renderEmpty();
        return;
      }
      const [listed, profile, userFacts, assistantFacts] = await Promise.all([
        listAllPages(space),
        api("GET", space, "/profile"),
        api("GET", space, "/facts", { query: { kind: "user" } }),
        api("GET", space, "/facts", { query: { kind: "assistant" } }),
      ]);
      if (generation !== state.refreshGeneration) return;
      state.stats = stats;
      state.pages = listed.pages;
      renderCounts(stats, listed);
      renderHeatChart(stats);
      renderSegmentDetail();
      renderShortTerm(listed.pages);
      renderProfile(profile.profile);
      renderFacts($("user-facts"), userFacts, space);
      renderFacts($("assistant-facts"), assistantFacts, space);
    } catch (error) {
      if (generation === state.refreshGeneration) sayError(error, "Reading the space");
    } finally {
      if (generation === state.refreshGeneration) state.refreshing = false;
    }
  }

  function renderEmpty() {
    state.stats = null;
    state.pages = [];
    state.selectedSegment = null;
    replace($("counts"), el("p", { id: "space-empty", class: "empty", text: "No memory for this user and assistant: the space is empty." }));
    replace($("heat-chart"), el("p", { class: "empty", text: "No mid-term segments." }));
    renderSegmentDetail();
    replace($("short-term"), el("li", { class: "empty", text: "No short-term pages." }));
    renderProfile("");
    replace($("user-facts"), el("li", { class: "empty", text: "None." }));
    replace($("assistant-facts"), el("li", { class: "empty", text: "None." }));
  }

  /** A byte count as people read it ("1.4 MB"); "—" when the server does not report it. */
  function formatBytes(bytes) {
    if (typeof bytes !== "number") return "—";
    const units = ["B", "kB", "MB", "GB", "TB"];
    let value = bytes;
    let unit = 0;
    while (value >= 1000 && unit < units.length - 1) {
      value /= 1000;
      unit += 1;
    }
    return `${unit === 0 ? value : value.toFixed(1)} ${units[unit]}`;
  }

  function renderCounts(stats, listed) {
    const usage = Object.values(stats.llm_usage || {});
    const llmCalls = usage.reduce((sum, op) => sum + (op.calls || 0), 0);
    const tiles = [
      ["short-term pages", stats.short_term_pages, "count-stm"],
      ["mid-term pages", stats.mid_term_pages, "count-mtm"],
      ["archived pages", stats.archived_pages, "count-archived"],
      ["segments", stats.segments.length, "count-segments"],
      ["user facts", stats.user_knowledge, "count-user-facts"],
      ["assistant facts", stats.assistant_knowledge, "count-assistant-facts"],
      ["profile versions", stats.profile_versions, "count-profile"],
      ["LLM calls (this process)", llmCalls, "count-llm"],
      ["storage", formatBytes(stats.storage_bytes), "count-storage"],
    ];
    const note = listed.total === null ? `only the first ${MAX_LISTED_PAGES} pages are listed` : null;
    replace(
      $("counts"),
      tiles.map(([label, value, id]) => el("div", { class: "tile", id }, el("b", { text: value }), el("span", { text: label }))),
      el("p", { class: "muted small" }, `embedding model ${stats.embedding_model} (${stats.embedding_dim} dimensions)`, note ? ` · ${note}` : ""),
    );
  }

  /** Mid-term segments as horizontal bars, hottest first: each bar stacks heat's three parts
   * (visits, length, recency, as /stats reports them) against the promotion threshold's line. */
  function renderHeatChart(stats) {
    const chart = $("heat-chart");
    const segments = [...stats.segments].sort((a, b) => b.heat - a.heat || a.segment_id - b.segment_id);
    if (segments.length === 0) {
      replace(chart, el("p", { class: "empty", text: "No mid-term segments yet: short-term pages are filed into segments when short-term memory overflows." }));
      return;
    }
    const shown = segments.slice(0, MAX_CHART_SEGMENTS);
    const threshold = typeof stats.promotion_threshold === "number" ? stats.promotion_threshold : null;
    const width = Math.max(360, chart.clientWidth || 560);
    const label = 150, right = 56, row = 26, top = 22, bottom = 26;
    const height = top + shown.length * row + bottom;
    const max = Math.max(threshold || 0, ...shown.map((s) => s.heat), 1e-9) * 1.05;
    const x = (value) => label + (Math.max(0, value) / max) * (width - label - right);

    const root = svg("svg", { viewBox: `0 0 ${width} ${height}`, width, height, role: "img", "aria-label": "Heat of each mid-term segment" });
    for (const tick of ticks(max)) {
      root.append(svg("line", { x1: x(tick), x2: x(tick), y1: top - 4, y2: height - bottom, class: "grid" }));
      root.append(svg("text", { x: x(tick), y: height - 8, class: "axis", "text-anchor": "middle", text: fmt(tick, tick < 10 ? 1 : 0) }));
    }
    shown.forEach((segment, i) => {
      const y = top + i * row;
      const hot = threshold !== null && segment.heat >= threshold;
      const group = svg("g", {
        class: `segment-bar${hot ? " hot" : ""}${segment.segment_id === state.selectedSegment ? " selected" : ""}`,
        "data-segment-id": segment.segment_id,
        tabindex: 0,
        role: "button",
        "aria-label": `segment ${segment.segment_id}, heat ${fmtHeat(segment.heat)}`,
      });
      group.append(svg("title", { text: segmentTooltip(segment) }));
      group.append(svg("rect", { x: 0, y: y + 1, width, height: row - 2, class: "row-hit" }));
      group.append(svg("text", { x: 6, y: y + row / 2 + 4, class: "label", text: `#${segment.segment_id} · ${segment.page_count} page${segment.page_count === 1 ? "" : "s"}` }));
      const parts = heatParts(segment);
      let at = 0;
      for (const [name, value] of parts) {
        if (value <= 0) continue;
        group.append(svg("rect", { x: x(at), y: y + 5, width: Math.max(1, x(at + value) - x(at)), height: row - 10, class: `part part-${name}` }));
        at += value;
      }
      group.append(svg("text", { x: x(segment.heat) + 4, y: y + row / 2 + 4, class: "value", text: fmtHeat(segment.heat) }));
      const room = Math.floor((width - x(segment.heat) - 46) / 6.6); // characters that fit after the value
      if (room > 12 && segment.summary) {
        const summary = segment.summary.length > room ? `${segment.summary.slice(0, room - 1)}…` : segment.summary;
        group.append(svg("text", { x: x(segment.heat) + 38, y: y + row / 2 + 4, class: "summary", text: summary }));
      }
      const open = () => selectSegment(segment.segment_id);
      group.addEventListener("click", open);
      group.addEventListener("keydown", (event) => {
        if (event.key === "Enter" || event.key === " ") {
          event.preventDefault();
          open();
        }
      });
      root.append(group);
    });
    if (threshold !== null) {
      root.append(svg("line", { x1: x(threshold), x2: x(threshold), y1: top - 8, y2: height - bottom, class: "threshold" }));
      root.append(svg("text", { x: x(threshold), y: top - 10, class: "threshold-label", "text-anchor": "middle", text: `promotion threshold ${fmt(threshold, 1)}` }));
    }
    const more = segments.length > shown.length ? el("p", { class: "muted small", text: `The ${shown.length} hottest of ${segments.length} segments.` }) : null;
    replace(chart, root, more);
  }

  /** The stacked parts; a server without them (older) gives the heat as one part. */
  function heatParts(segment) {
    const parts = [["visits", segment.heat_visits], ["length", segment.heat_length], ["recency", segment.heat_recency]];
    const known = parts.every(([, v]) => typeof v === "number") && parts.some(([, v]) => v > 0);
    return known ? parts : [["total", segment.heat]];
  }

  function segmentTooltip(segment) {
    return `Segment #${segment.segment_id}: heat ${fmtHeat(segment.heat, 3)} = visits ${fmtHeat(segment.heat_visits, 3)} + length ${fmtHeat(segment.heat_length, 3)} + recency ${fmtHeat(segment.heat_recency, 3)}\n${segment.summary}`;
  }

  function ticks(max) {
    const step = niceStep(max / 5);
    const out = [];
    for (let t = 0; t <= max + 1e-9; t += step) out.push(t);
    return out;
  }

  function niceStep(raw) {
    const power = 10 ** Math.floor(Math.log10(raw || 1));
    const scaled = raw / power;
    return (scaled <= 1 ? 1 : scaled <= 2 ? 2 : scaled <= 5 ? 5 : 10) * power;
  }

  function selectSegment(segmentId) {
    state.selectedSegment = state.selectedSegment === segmentId ? null : segmentId;
    for (const bar of document.querySelectorAll(".segment-bar")) {
      bar.classList.toggle("selected", Number(bar.dataset.segmentId) === state.selectedSegment);
    }
    renderSegmentDetail();
  }

  /** The selected segment: its summary, heat parts, and its pages grouped by dialogue chain. */
  function renderSegmentDetail() {
    const detail = $("segment-detail");
    const segment = state.stats?.segments.find((s) => s.segment_id === state.selectedSegment);
    if (!segment) {
      detail.hidden = true;
      detail.replaceChildren();
      return;
    }
    const pages = state.pages.filter((p) => p.segment_id === segment.segment_id);
    const chains = new Map();
    for (const page of pages) {
      const key = page.chain_id ?? `page-${page.page_id}`;
      if (!chains.has(key)) chains.set(key, { chainId: page.chain_id, summary: page.meta_info, pages: [] });
      chains.get(key).pages.push(page);
    }
    detail.hidden = false;
    replace(
      detail,
      el("h4", { text: `Segment #${segment.segment_id}` }),
      el("p", { class: "summary", text: segment.summary || "(no summary)" }),
      el("p", { class: "muted small", text: `heat ${fmtHeat(segment.heat, 3)} = visits ${fmtHeat(segment.heat_visits, 3)} + length ${fmtHeat(segment.heat_length, 3)} + recency ${fmtHeat(segment.heat_recency, 3)}` }),
      [...chains.values()].map((chain) =>
        el(
          "div",
          { class: "chain" },
          el("p", { class: "chain-summary", text: chain.chainId === null || chain.chainId === undefined ? "No dialogue chain" : `Chain #${chain.chainId}: ${chain.summary || "(no summary yet)"}` }),
          el("ol", { class: "pages" }, chain.pages.map((p) => pageItem(p))),
        ),
      ),
      pages.length === 0 ? el("p", { class: "empty", text: "Its pages are not in the listed pages." }) : null,
    );
  }

  function pageItem(page, extra) {
    const badges = [
      page.tier ? el("span", { class: `badge tier-${page.tier}`, text: page.tier }) : null,
      page.segment_id !== null && page.segment_id !== undefined ? el("span", { class: "badge", text: `segment #${page.segment_id}` }) : null,
      page.analyzed ? el("span", { class: "badge ok", text: "analyzed" }) : null,
      page.embedded === false ? el("span", { class: "badge warn", text: "embedding…" }) : null,
      extra,
    ];
    return el(
      "li",
      { class: "page", dataset: { pageId: page.page_id } },
      el("div", { class: "page-head" }, el("span", { class: "muted", text: `#${page.page_id} · ${page.timestamp}` }), badges),
      el("div", { class: "said user-said" }, el("b", { text: "User: " }), page.user_input),
      el("div", { class: "said assistant-said" }, el("b", { text: "Assistant: " }), page.agent_response),
      page.meta_info ? el("div", { class: "chain-summary", text: `Chain summary: ${page.meta_info}` }) : null,
    );
  }

  function renderShortTerm(pages) {
    const shortTerm = pages.filter((p) => p.tier === "stm");
    replace($("short-term"), shortTerm.length ? shortTerm.map((p) => pageItem(p)) : el("li", { class: "empty", text: "No short-term pages." }));
  }

  function renderProfile(profile) {
    $("profile").textContent = profile || "(no profile yet: it is written when a hot segment is promoted)";
    $("profile").classList.toggle("empty", !profile);
  }

  function renderFacts(list, facts, space) {
    if (!facts.length) {
      replace(list, el("li", { class: "empty", text: "None." }));
      return;
    }
    replace(
      list,
      facts.map((fact) => {
        const history = el("ol", { class: "history", hidden: true });
        const toggle = el("button", { type: "button", class: "link", text: "history", onclick: () => toggleHistory(fact, history, space) });
        const sources = fact.source_page_ids?.length ? ` · from page${fact.source_page_ids.length > 1 ? "s" : ""} ${fact.source_page_ids.map((id) => `#${id}`).join(", ")}` : "";
        return el(
          "li",
          { class: "fact", dataset: { entryId: fact.entry_id } },
          el("span", { class: "fact-text", text: fact.knowledge }),
          el("span", { class: "muted small", text: ` (#${fact.entry_id} · ${fact.timestamp} · ${fact.origin}${sources}) ` }),
          toggle,
          history,
        );
      }),
    );
  }

  async function toggleHistory(fact, list, space) {
    if (!list.hidden) {
      list.hidden = true;
      return;
    }
    try {
      const history = await api("GET", space, `/facts/${fact.entry_id}/history`);
      replace(
        list,
        history.versions.map((version, i) =>
          el(
            "li",
            { class: version.active ? "active" : "replaced" },
            el("span", { text: `v${i + 1}: ${version.knowledge}` }),
            el("span", { class: "muted small", text: ` (${version.timestamp} · ${version.origin}${version.active ? " · current" : version.replaced_by ? ` · replaced by #${version.replaced_by}` : ""})` }),
          ),
        ),
      );
      list.hidden = false;
    } catch (error) {
      sayError(error, "Reading the fact's history");
    }
  }

  // --- chat ------------------------------------------------------------------------------------------
  async function ask(question) {
    const space = currentSpace();
    const log = $("chat-log");
    const asked = el("li", { class: "message user" }, el("div", { class: "who", text: state.user }), el("div", { class: "text", text: question }));
    log.append(asked);
    const reply = el("li", { class: "message assistant pending" }, el("div", { class: "who", text: state.assistant }), el("div", { class: "text", text: "…" }));
    log.append(reply);
    log.scrollTop = log.scrollHeight;
    try {
      const showContext = $("show-context").checked;
      let context = null;
      if (showContext) {
        try {
          context = await api("POST", space, "/retrieve", { json: { query: question } });
        } catch (error) {
          if (!isMissingSpace(error)) throw error; // no memory yet: the answer uses none
        }
      }
      const answer = await api("POST", space, "/response", { json: { query: question } });
      reply.classList.remove("pending");
      replace(reply, el("div", { class: "who", text: state.assistant }), el("div", { class: "text answer", text: answer.response }), showContext ? contextView(context) : null);
      say("Answered; the exchange is now in short-term memory.");
    } catch (error) {
      reply.classList.remove("pending");
      reply.classList.add("failed");
      replace(reply, el("div", { class: "who", text: state.assistant }), el("div", { class: "text", text: error instanceof ApiError ? error.describe() : error.message }));
      sayError(error, "Asking");
    }
    log.scrollTop = asked.offsetTop; // the question, then its answer's top
    await refresh();
  }

  /** What the answer was built from: short-term pages, retrieved pages with scores and chain
   * summaries, facts with scores, and the profile. */
  function contextView(context) {
    const details = el("details", { class: "context", open: true });
    details.append(el("summary", { text: "Context used" }));
    if (!context) {
      details.append(el("p", { class: "empty", text: "No memory yet for this user: the answer used none." }));
      return details;
    }
    const section = (title, cls, items, render) =>
      el("section", { class: `ctx ${cls}` }, el("h5", { text: `${title} (${items.length})` }), items.length ? el("ol", {}, items.map(render)) : el("p", { class: "empty", text: "None." }));
    const score = (item) => el("span", { class: "badge score", text: `score ${fmt(item.score, 3)}` });
    const fact = (item) => el("li", {}, el("span", { text: item.knowledge }), " ", score(item));
    append(details, [
      section("Short-term pages", "ctx-short-term", context.short_term_memory, (p) => pageItem(p)),
      section("Retrieved pages", "ctx-retrieved", context.retrieved_pages, (p) => pageItem(p, score(p))),
      section("User facts", "ctx-user-facts", context.retrieved_user_knowledge, fact),
      section("Assistant facts", "ctx-assistant-facts", context.retrieved_assistant_knowledge, fact),
      el(
        "section",
        { class: "ctx ctx-profile" },
        el("h5", { text: context.user_profile_version ? `Profile (version ${context.user_profile_version})` : "Profile" }),
        el("pre", { class: context.user_profile ? "profile" : "profile empty", text: context.user_profile || "(none yet)" }),
      ),
    ]);
    return details;
  }

  // --- import ----------------------------------------------------------------------------------------
  const MONTHS = ["january", "february", "march", "april", "may", "june", "july", "august", "september", "october", "november", "december"];
  const NO_MESSAGE = "(no message)";
  const NO_REPLY = "(no reply)";

  /** The conversations a JSON document holds, each `{name, turns}`: LoCoMo's raw layout (a list of
   * samples), its pairs layout (`{sample_id, pairs}`), or plain turns (a list, or `{turns: [...]}`). */
  function conversationsIn(doc, fileName) {
    if (Array.isArray(doc) && doc.length && doc.every((s) => s && typeof s === "object" && s.conversation)) {
      return doc.map((sample, i) => ({ name: sample.sample_id || `conversation ${i + 1}`, turns: locomoRawTurns(sample.conversation) }));
    }
    if (doc && !Array.isArray(doc) && Array.isArray(doc.pairs)) {
      return [{ name: doc.sample_id || "LoCoMo pairs", turns: plainTurns(doc.pairs, "pairs") }];
    }
    if (doc && !Array.isArray(doc) && Array.isArray(doc.turns)) return [{ name: fileName, turns: plainTurns(doc.turns, "turns") }];
    if (Array.isArray(doc)) return [{ name: fileName, turns: plainTurns(doc, "turns") }];
    throw new Error("not a LoCoMo file (a list of samples, or {sample_id, pairs}) nor a list of {user_input, agent_response} turns");
  }

  function plainTurns(items, what) {
    return items.map((item, i) => {
      if (!item || typeof item.user_input !== "string" || typeof item.agent_response !== "string") {
        throw new Error(`${what}[${i}] needs text user_input and agent_response`);
      }
      const turn = { user_input: item.user_input, agent_response: item.agent_response };
      if (typeof item.timestamp === "string" && item.timestamp) turn.timestamp = item.timestamp;
      if (item.meta_data && typeof item.meta_data === "object" && !Array.isArray(item.meta_data)) turn.meta_data = item.meta_data;
      return turn;
    });
  }

  /** LoCoMo's upstream layout as turns, by the rules of memoryos/eval/locomo.py: speaker_a is the user,
   * each of their turns paired with speaker_b's next one; an unpaired side is "(no message)" or
   * "(no reply)"; an image's caption is appended; sessions in number order, stamped with their date. */
  function locomoRawTurns(conversation) {
    const a = conversation.speaker_a, b = conversation.speaker_b;
    const sessions = Object.keys(conversation)
      .map((key) => /^session_(\d+)$/.exec(key))
      .filter((match) => match && Array.isArray(conversation[match[0]]) && conversation[match[0]].length)
      .map((match) => Number(match[1]))
      .sort((x, y) => x - y);
    const turns = [];
    for (const session of sessions) {
      const timestamp = locomoTimestamp(conversation[`session_${session}_date_time`]);
      const push = (user, assistant) => {
        const turn = { user_input: user ? turnText(user) : NO_MESSAGE, agent_response: assistant ? turnText(assistant) : NO_REPLY };
        if (timestamp) turn.timestamp = timestamp;
        turns.push(turn);
      };
      let pending = null;
      for (const turn of conversation[`session_${session}`]) {
        if (turn.speaker === a) {
          if (pending) push(pending, null);
          pending = turn;
        } else if (turn.speaker === b) {
          push(pending, turn);
          pending = null;
        } else {
          throw new Error(`${turn.dia_id} is spoken by ${JSON.stringify(turn.speaker)}, neither ${a} nor ${b}`);
        }
      }
      if (pending) push(pending, null);
    }
    return turns;
  }

  function turnText(turn) {
    return turn.blip_caption ? `${turn.text} (image description: ${turn.blip_caption})` : turn.text;
  }

  /** "1:56 pm on 8 May, 2023" as "2023-05-08 13:56:00"; undefined (the server's now) if unreadable. */
  function locomoTimestamp(raw) {
    const match = /^\s*(\d{1,2}):(\d{2})\s*(am|pm)\s+on\s+(\d{1,2})\s+([A-Za-z]+),?\s+(\d{4})\s*$/i.exec(raw || "");
    if (!match) return undefined;
    const month = MONTHS.indexOf(match[5].toLowerCase());
    if (month < 0) return undefined;
    let hour = Number(match[1]) % 12;
    if (match[3].toLowerCase() === "pm") hour += 12;
    const two = (n) => String(n).padStart(2, "0");
    return `${match[6]}-${two(month + 1)}-${two(Number(match[4]))} ${two(hour)}:${match[2]}:00`;
  }

  async function chooseFile(file) {
    const select = $("import-conversation");
    state.importable = [];
    select.replaceChildren();
    select.disabled = true;
    $("import-progress").value = 0;
    if (!file) return setButtons();
    try {
      state.importable = conversationsIn(JSON.parse(await file.text()), file.name).filter((c) => c.turns.length);
      if (!state.importable.length) throw new Error("it holds no turns");
      state.importable.forEach((c, i) => select.append(el("option", { value: i, text: `${c.name}: ${c.turns.length} turns` })));
      select.disabled = state.importable.length < 2;
      $("import-status").textContent = `${file.name}: ready`;
    } catch (error) {
      $("import-status").textContent = "";
      say(`Cannot import ${file.name}: ${error.message}`, "error");
    }
    setButtons();
  }

  /** Sends the chosen conversation in batches (each its own write id, so a retried batch is stored
   * once), then waits until the last batch is searchable. */
  async function importChosen() {
    const conversation = state.importable[Number($("import-conversation").value) || 0];
    if (!conversation) return;
    const space = currentSpace();
    const progress = $("import-progress");
    const status = $("import-status");
    const total = conversation.turns.length;
    const run = randomId();
    await busy(async () => {
      let sent = 0;
      let lastWrite = null;
      progress.max = total;
      progress.value = 0;
      try {
        for (let start = 0; start < total; start += BATCH_TURNS) {
          const turns = conversation.turns.slice(start, start + BATCH_TURNS);
          const accepted = await apiPatiently("POST", space, "/memories/batch", { json: { turns, write_id: `pg-${run}-${start / BATCH_TURNS}` } });
          lastWrite = accepted.write_id;
          sent += turns.length;
          progress.value = sent;
          status.textContent = `${sent} / ${total} turns sent`;
        }
        status.textContent = `${total} turns sent; embedding…`;
        await waitSearchable(space, lastWrite);
        status.textContent = `Imported ${total} turns from ${conversation.name}`;
        say(`Imported ${total} turns into ${space.user} / ${space.assistant}.`);
      } catch (error) {
        status.textContent = `stopped after ${sent} / ${total} turns`;
        sayError(error, "Importing");
      }
    });
    await refresh();
  }

  async function waitSearchable(space, writeId) {
    const deadline = Date.now() + WRITE_WAIT_MS;
    for (let pause = 50; Date.now() < deadline; pause = Math.min(pause * 2, 1000)) {
      const status = await api("GET", space, `/writes/${encodeURIComponent(writeId)}`);
      if (status.searchable) return;
      await sleep(pause);
    }
    throw new Error("the import was stored but is not searchable yet; it will be shortly");
  }

  function randomId() {
    const bytes = crypto.getRandomValues(new Uint8Array(8));
    return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
  }

  // --- actions ---------------------------------------------------------------------------------------
  async function consolidate() {
    const space = currentSpace();
    await busy(async () => {
      try {
        say("Consolidating…");
        await api("POST", space, "/consolidate");
        say("Consolidated: segments with new pages were analyzed into the profile and facts.");
      } catch (error) {
        if (isMissingSpace(error)) say("Nothing to consolidate: this space holds no memory.", "error");
        else sayError(error, "Consolidating");
      }
    });
    await refresh();
  }

  async function exportSpace() {
    const space = currentSpace();
    await busy(async () => {
      try {
        const blob = await api("GET", space, "/export", { asBlob: true });
        const url = URL.createObjectURL(blob);
        const link = el("a", { href: url, download: `memoryos-${space.user}-${space.assistant}.zip` });
        document.body.append(link);
        link.click();
        link.remove();
        setTimeout(() => URL.revokeObjectURL(url), 10000);
        say(`Exported ${space.user} / ${space.assistant}: ${(blob.size / 1024).toFixed(1)} KiB.`);
      } catch (error) {
        if (isMissingSpace(error)) say("Nothing to export: this space holds no memory.", "error");
        else sayError(error, "Exporting");
      }
    });
  }

  function askForget() {
    $("forget-name").textContent = `${state.user} / ${state.assistant}`;
    $("forget-dialog").showModal();
  }

  async function forget() {
    $("forget-dialog").close();
    const space = currentSpace();
    await busy(async () => {
      try {
        await api("DELETE", space, "");
        state.selectedSegment = null;
        $("chat-log").append(el("li", { class: "message system", text: `Memory of ${space.user} / ${space.assistant} forgotten.` }));
        say(`Forgot ${space.user} / ${space.assistant}: every page, fact and profile version is erased.`);
      } catch (error) {
        if (isMissingSpace(error)) say("Nothing to forget: this space holds no memory.", "error");
        else sayError(error, "Forgetting");
      }
    });
    await refresh();
  }

  function openSpace() {
    const user = $("user-id").value.trim();
    const assistant = $("assistant-id").value.trim();
    if (!user || !assistant) {
      say("A user id and an assistant id are needed.", "error");
      return;
    }
    state.key = $("api-key").value;
    sessionStorage.setItem(STORE.key, state.key);
    const changed = user !== state.user || assistant !== state.assistant;
    state.user = user;
    state.assistant = assistant;
    sessionStorage.setItem(STORE.user, user);
    sessionStorage.setItem(STORE.assistant, assistant);
    if (changed) {
      state.selectedSegment = null;
      $("chat-log").replaceChildren();
    }
    $("space-name").textContent = `${user} / ${assistant}`;
    say(`Showing ${user} / ${assistant}.`);
    refresh();
  }

  // --- wiring ----------------------------------------------------------------------------------------
  function start() {
    $("user-id").value = state.user;
    $("assistant-id").value = state.assistant;
    $("api-key").value = state.key;
    $("space-name").textContent = `${state.user} / ${state.assistant}`;
    $("open-space").addEventListener("click", openSpace);
    for (const id of ["user-id", "assistant-id", "api-key"]) {
      $(id).addEventListener("keydown", (event) => {
        if (event.key === "Enter") openSpace();
      });
    }
    $("chat-form").addEventListener("submit", (event) => {
      event.preventDefault();
      const question = $("chat-input").value.trim();
      if (!question || state.busy) return;
      $("chat-input").value = "";
      busy(() => ask(question));
    });
    $("chat-input").addEventListener("keydown", (event) => {
      if (event.key === "Enter" && !event.shiftKey) {
        event.preventDefault();
        $("chat-form").requestSubmit();
      }
    });
    $("import-file").addEventListener("change", (event) => chooseFile(event.target.files[0]));
    $("import-start").addEventListener("click", importChosen);
    $("consolidate").addEventListener("click", consolidate);
    $("export").addEventListener("click", exportSpace);
    $("forget").addEventListener("click", askForget);
    $("forget-cancel").addEventListener("click", () => $("forget-dialog").close());
    $("forget-confirm").addEventListener("click", forget);
    $("refresh").addEventListener("click", refresh);
    setInterval(() => {
      if ($("auto-refresh").checked && !document.hidden && !state.refreshing && !state.busy) refresh();
    }, REFRESH_MS);
    setButtons();
    refresh();
  }

  start();
})();
