// Sundial's dashboard: plain JavaScript, no framework, nothing fetched but from the server
// that served the page. The rows come from one stream of server-sent events (/api/stream,
// fed by one watch of ScheduledJobs); the list draws only the rows in view.
"use strict";

(() => {
  const ROW_HEIGHT = 30;
  const OVERSCAN = 8;
  const KINDS = [
    ["succeeded", "succeeded"], ["failed", "failed"], ["timedout", "timed out"],
    ["missed", "missed (its reason's letter)"], ["skipped", "skipped (overlap)"],
    ["cancelled", "cancelled / terminated"], ["unknown", "unknown"], ["running", "running"],
  ];
  const $ = (id) => document.getElementById(id);

  // What tests and the benchmark read: the rows, whether the first listing is in, renders.
  const state = {
    rows: new Map(), order: [], synced: false, snapshot: false, renders: 0, loadedAt: Date.now(),
    facets: { ns: {}, backend: {}, state: {} }, states: {}, problems: [], scope: null,
    details: new Map(), open: null, source: null, events: 0,
  };
  window.sundial = state;

  // ---- small helpers ---------------------------------------------------------------------

  function el(tag, cls, text) {
    const node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  function span(seconds) {
    if (seconds === null || seconds === undefined) return "-";
    let s = Math.round(Math.abs(seconds));
    if (s < 60) return `${s}s`;
    const d = Math.floor(s / 86400); s -= d * 86400;
    const h = Math.floor(s / 3600); s -= h * 3600;
    const m = Math.floor(s / 60); s -= m * 60;
    if (d) return h ? `${d}d${h}h` : `${d}d`;
    if (h) return m ? `${h}h${m}m` : `${h}h`;
    return s ? `${m}m${s}s` : `${m}m`;
  }

  function when(epoch) {
    if (epoch === null || epoch === undefined) return "-";
    const iso = new Date(epoch * 1000).toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
    const delta = epoch - Date.now() / 1000;
    return `${iso} (${delta >= 0 ? "in " + span(delta) : span(delta) + " ago"})`;
  }

  function nowSeconds() { return Date.now() / 1000; }

  // ---- the filters: in the URL, so a view can be shared and reloaded ---------------------

  const FILTERS = ["q", "ns", "backend", "state", "label"];

  function readFilters() {
    const params = new URLSearchParams(location.search);
    for (const name of FILTERS) {
      const input = $("f-" + name);
      const value = params.get(name) || "";
      // A select learns its choices from the server later: keep the asked one meanwhile.
      if (input.tagName === "SELECT" && value && ![...input.options].some((o) => o.value === value)) {
        const option = el("option", null, value);
        option.value = value;
        input.append(option);
      }
      input.value = value;
    }
    if (params.get("range") !== null) $("f-range").value = params.get("range");
  }

  function filterQuery() {
    const params = new URLSearchParams();
    for (const name of FILTERS) {
      const value = $("f-" + name).value.trim();
      if (value) params.set(name, value);
    }
    return params;
  }

  function rangeSeconds() { return Number($("f-range").value) || 0; }

  let reconnectTimer = null;
  // The range is drawn here; the other filters are the server's (a new stream).
  function filtersChanged(immediately, reconnect = true) {
    const params = filterQuery();
    params.set("range", $("f-range").value);
    history.replaceState(null, "", "?" + params.toString() + location.hash);
    if (!reconnect) {
      scheduleRender();
      return;
    }
    clearTimeout(reconnectTimer);
    reconnectTimer = setTimeout(connect, immediately ? 0 : 250);
  }

  function fillSelect(id, counts, words) {
    const select = $(id);
    const chosen = select.value;
    const keep = select.options[0];
    select.replaceChildren(keep);
    const names = Object.keys(counts);
    if (chosen && !names.includes(chosen)) names.push(chosen);
    for (const name of names) {
      const option = el("option", null, `${(words && words[name]) || name} (${counts[name] || 0})`);
      option.value = name;
      select.append(option);
    }
    select.value = chosen;
  }

  // ---- the stream --------------------------------------------------------------------------

  function connect() {
    if (state.source) state.source.close();
    state.synced = false;
    state.snapshot = false;
    document.documentElement.dataset.synced = "0";
    setLive("connecting", "connecting");
    const source = new EventSource("/api/stream?" + filterQuery().toString());
    state.source = source;
    const on = (name, handler) => source.addEventListener(name, (event) => {
      state.events += 1;
      handler(JSON.parse(event.data));
    });
    on("hello", (hello) => {
      state.states = hello.states;
      setScope(hello.scope);
      setProblems(hello.problems);
      setFacets(hello.facets);
      state.synced = hello.synced;
      $("filter-error").hidden = true;
    });
    on("filter", (said) => {
      $("filter-error").textContent = `The filter was not applied: ${said.error}`;
      $("filter-error").hidden = false;
    });
    on("snapshot", (snapshot) => {
      state.rows = new Map(snapshot.rows.map((row) => [row.key, row]));
      state.snapshot = true;
      reorder();
      setLive("live", "live");
      if (state.synced) markSynced();
    });
    on("rows", (change) => {
      for (const row of change.upsert) {
        state.rows.set(row.key, row);
        state.details.delete(row.key);
      }
      for (const key of change.remove) state.rows.delete(key);
      reorder();
      if (state.open && change.upsert.some((row) => row.key === state.open)) showDetail(state.open);
    });
    on("problems", setProblems);
    on("scope", setScope);
    on("facets", setFacets);
    on("synced", () => { state.synced = true; markSynced(); });
    source.onerror = () => {
      setLive("lost", "connection lost: reconnecting");
    };
    source.onopen = () => setLive("live", "live");
  }

  function markSynced() {
    if (!state.snapshot) return;
    render();
    document.documentElement.dataset.synced = "1";
    if (!performance.getEntriesByName("sundial-synced").length) performance.mark("sundial-synced");
  }

  function setLive(kind, words) {
    $("live").dataset.live = kind;
    $("live").textContent = words;
  }

  function setScope(scope) {
    state.scope = scope;
    if (!scope) return;
    let text;
    if (scope.all) text = "ScheduledJobs in every namespace";
    else if (scope.namespaces.length) text = `ScheduledJobs in ${scope.namespaces.join(", ")}`;
    else text = "no namespace readable";
    if (scope.note && !scope.all) text += ` \u2014 ${scope.note}`;
    $("scope").textContent = text + " \u00b7 read-only, with your kubeconfig's rights";
  }

  function setProblems(problems) {
    state.problems = problems;
    const box = $("problems");
    box.replaceChildren(...problems.map((problem) => {
      const p = el("p");
      p.append(el("strong", null, "Cannot show everything: "), problem.message);
      p.dataset.problem = problem.name;
      return p;
    }));
    box.hidden = problems.length === 0;
    renderEmpty();
  }

  function setFacets(facets) {
    state.facets = facets;
    fillSelect("f-ns", facets.ns);
    fillSelect("f-backend", facets.backend);
    fillSelect("f-state", facets.state);
  }

  // ---- the list ----------------------------------------------------------------------------

  function reorder() {
    state.order = [...state.rows.keys()].sort();
    scheduleRender();
  }

  let frame = 0;
  function scheduleRender() {
    if (!frame) frame = requestAnimationFrame(() => { frame = 0; render(); });
  }

  function render() {
    state.renders += 1;
    const viewport = $("viewport");
    const rows = $("rows");
    rows.style.height = `${state.order.length * ROW_HEIGHT}px`;
    const first = Math.max(0, Math.floor(viewport.scrollTop / ROW_HEIGHT) - OVERSCAN);
    const last = Math.min(state.order.length,
      Math.ceil((viewport.scrollTop + viewport.clientHeight) / ROW_HEIGHT) + OVERSCAN);
    const drawn = [];
    for (let i = first; i < last; i += 1) {
      const node = drawRow(state.rows.get(state.order[i]));
      node.style.top = `${i * ROW_HEIGHT}px`;
      drawn.push(node);
    }
    rows.replaceChildren(...drawn);
    const total = Object.values(state.facets.ns || {}).reduce((a, b) => a + b, 0);
    $("count").textContent = `${state.order.length} shown of ${total}`;
    renderEmpty();
  }

  function renderEmpty() {
    const empty = $("empty");
    const nothing = state.snapshot && state.order.length === 0;
    empty.hidden = !nothing;
    if (!nothing) return;
    if (state.problems.length) empty.textContent = "Nothing to show: see above.";
    else if (!state.synced) empty.textContent = "Listing ScheduledJobs\u2026";
    else if (filterQuery().toString()) empty.textContent = "No ScheduledJob matches the filters.";
    else empty.textContent = "No ScheduledJobs in the namespaces you may read.";
  }

  function visibleCells(row) {
    const range = rangeSeconds();
    const since = range ? nowSeconds() - range : -Infinity;
    const out = [];
    row.cells.forEach((cell, index) => { if (cell[2] >= since) out.push([cell, index]); });
    return out;
  }

  function drawCells(track, row, big) {
    for (const [cell, index] of visibleCells(row)) {
      const node = el("span", `cell k-${cell[0]}${cell[4] ? " late" : ""}`, cell[1]);
      node.dataset.kind = cell[0];
      node.dataset.index = index;
      node.dataset.key = row.key;
      track.append(node);
    }
    for (const mark of row.marks) {
      const node = el("span", `mark k-${mark.kind}`, big ? mark.note : `z ${mark.kind}`);
      node.dataset.kind = mark.kind;
      node.dataset.mark = mark.note;
      node.dataset.key = row.key;
      track.append(node);
    }
    track.append(el("span", "now"));
    if (row.marks.length) return;
    const now = nowSeconds();
    row.next.slice(0, 3).forEach((moment) => {
      const next = el("span", `next${moment < now - 60 ? " overdue" : ""}`);
      next.dataset.next = moment;
      next.dataset.key = row.key;
      track.append(next);
    });
    if (row.next.length) {
      const first = row.next[0] - now;
      track.append(el("span", "next-text",
        first < -60 ? `due ${span(first)} ago` : `next in ${span(Math.max(first, 0))}`));
    }
  }

  function lastDuration(row) {
    for (let i = row.cells.length - 1; i >= 0; i -= 1) {
      if (row.cells[i][3] !== null) return row.cells[i][3];
    }
    return null;
  }

  function drawRow(row) {
    const node = el("div", "row");
    node.dataset.key = row.key;
    node.dataset.state = row.state;
    const name = el("span", "name");
    name.append(el("span", "n", row.name), el("span", "ns", row.ns));
    name.title = `${row.key}\n${row.backend} \u00b7 ${row.schedule} (${row.zone})`;
    const badge = el("span", "state");
    badge.append(el("span", `badge s-${row.state}`, row.state));
    const track = el("span", "track");
    if (row.error) track.append(el("span", "mark k-unknown", row.error));
    else drawCells(track, row, false);
    const took = lastDuration(row);
    const dur = el("span", "dur",
      took === null ? "-" : span(took) + (row.maxRun ? ` / ${span(row.maxRun)}` : ""));
    if (took !== null && row.maxRun && took > row.maxRun) dur.classList.add("over");
    node.append(name, badge, track, dur);
    return node;
  }

  // ---- hover: the cell's run or missed slot ------------------------------------------------

  async function detailOf(key) {
    const row = state.rows.get(key);
    const cached = state.details.get(key);
    if (cached && row && cached.rv === row.rv) return cached;
    const [ns, name] = key.split("/");
    const response = await fetch(`/api/object/${encodeURIComponent(ns)}/${encodeURIComponent(name)}`);
    if (!response.ok) return null;
    const found = await response.json();
    state.details.set(key, found);
    return found;
  }

  function tipLines(cell, full) {
    const lines = [["scheduled", when(cell[2])]];
    if (full) {
      if (full.start !== undefined) {
        lines.push(["started", when(full.start)]);
        if (full.delay !== null && full.delay !== undefined) {
          lines.push(["start delay", span(full.delay) + (full.late ? " (late)" : "")]);
        }
        if (full.completion) lines.push(["ended", when(full.completion)]);
        lines.push(["duration", full.duration === null ? (full.result === "Running" ?
          `running for ${span(nowSeconds() - full.start)}` : "-") : span(full.duration)]);
        lines.push(["result", full.result]);
        if (full.reason) lines.push(["reason", full.reason]);
        if (full.message) lines.push(["message", full.message]);
        if (full.requested) lines.push(["requested", full.requested]);
        if (full.job) lines.push(["Job", full.job]);
        if (full.workflowId) lines.push(["workflow", full.workflowId]);
        if (full.runId) lines.push(["run id", full.runId]);
      } else {
        lines.push(["reason", full.reason + (full.approximate ? " (approximate)" : "")]);
      }
    } else if (cell[3] !== null) {
      lines.push(["duration", span(cell[3])]);
    }
    return lines;
  }

  function showTip(target, title, lines) {
    const tip = $("tip");
    const dl = el("dl");
    for (const [term, value] of lines) dl.append(el("dt", null, term), el("dd", null, value));
    tip.replaceChildren(el("div", "tip-title", title), dl);
    tip.hidden = false;
    const box = target.getBoundingClientRect();
    const left = Math.min(box.left, window.innerWidth - tip.offsetWidth - 8);
    const below = box.bottom + 6 + tip.offsetHeight < window.innerHeight;
    tip.style.left = `${Math.max(4, left)}px`;
    tip.style.top = `${below ? box.bottom + 6 : box.top - tip.offsetHeight - 6}px`;
  }

  let hovered = null;
  async function hover(target) {
    hovered = target;
    const row = state.rows.get(target.dataset.key);
    if (!row) return;
    if (target.dataset.next) {
      showTip(target, `${row.name}: next run`, [["scheduled", when(Number(target.dataset.next))]]);
      return;
    }
    if (target.dataset.mark !== undefined) {
      const mark = row.marks.find((m) => m.note === target.dataset.mark) || {};
      showTip(target, `${row.name}: ${target.dataset.kind}`,
        [["why", target.dataset.mark], ["since", when(mark.since)]]);
      return;
    }
    const index = Number(target.dataset.index);
    const cell = row.cells[index];
    const title = `${row.name}: ${KINDS.find((k) => k[0] === cell[0])?.[1] || cell[0]}`;
    showTip(target, title, tipLines(cell, null));
    const full = await detailOf(row.key);
    if (hovered !== target || !full) return;
    showTip(target, title, tipLines(cell, full.cells_detail[index]));
  }

  function unhover() {
    hovered = null;
    $("tip").hidden = true;
  }

  // ---- the detail view -------------------------------------------------------------------

  function svg(tag, attrs, text) {
    const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
    for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, value);
    if (text !== undefined) node.textContent = text;
    return node;
  }

  // The duration of each run (oldest to newest) against maxRunDuration.
  function trend(full) {
    const runs = full.cells_detail.filter((c) => c.start !== undefined && c.start !== null);
    const width = 860, height = 200, left = 56, bottom = 24, top = 12;
    const chart = svg("svg", { viewBox: `0 0 ${width} ${height}`, class: "trend", role: "img",
      "aria-label": "run durations against maxRunDuration" });
    const durations = runs.map((c) => (c.duration !== null ? c.duration
      : Math.max(0, nowSeconds() - c.start)));
    const most = Math.max(1, full.maxRun || 0, ...durations) * 1.1;
    const y = (seconds) => top + (height - top - bottom) * (1 - seconds / most);
    for (const tick of [0, most / 2, most / 1.1]) {
      chart.append(svg("line", { x1: left, x2: width - 4, y1: y(tick), y2: y(tick), class: "axis" }));
      chart.append(svg("text", { x: left - 6, y: y(tick) + 4, "text-anchor": "end" }, span(tick)));
    }
    const slot = (width - left - 8) / Math.max(runs.length, 1);
    runs.forEach((cell, i) => {
      const bar = svg("rect", {
        x: left + 4 + i * slot, width: Math.max(2, slot * 0.7), y: y(durations[i]),
        height: Math.max(1, y(0) - y(durations[i])), class: `bar b-${cell.kind}`,
      });
      bar.append(svg("title", {}, `${when(cell.scheduled)}: ${cell.result}, ` +
        `${cell.duration === null ? "running" : span(cell.duration)}`));
      chart.append(bar);
    });
    if (full.maxRun) {
      chart.append(svg("line", { x1: left, x2: width - 4, y1: y(full.maxRun), y2: y(full.maxRun),
        class: "limit" }));
      chart.append(svg("text", { x: width - 6, y: y(full.maxRun) - 4, "text-anchor": "end" },
        `maxRunDuration ${span(full.maxRun)}`));
    }
    if (runs.length) {
      chart.append(svg("text", { x: left, y: height - 6 }, when(runs[0].scheduled)));
      chart.append(svg("text", { x: width - 6, y: height - 6, "text-anchor": "end" },
        when(runs[runs.length - 1].scheduled)));
    } else {
      chart.append(svg("text", { x: width / 2, y: height / 2, "text-anchor": "middle" },
        "no run has started yet"));
    }
    return chart;
  }

  function facts(pairs) {
    const dl = el("dl", "facts");
    for (const [term, value] of pairs) {
      if (value === null || value === undefined || value === "") continue;
      dl.append(el("dt", null, term), el("dd", null, value));
    }
    return dl;
  }

  function backendObject(ref) {
    if (!ref) return null;
    if (ref.kind === "CronJob") return `CronJob ${ref.namespace}/${ref.name}`;
    return `Temporal schedule ${ref.scheduleId} in ${ref.namespace}` +
      (ref.address ? ` at ${ref.address}` : "");
  }

  function table(head, rows) {
    const out = el("table", "runs");
    const tr = el("tr");
    for (const name of head) tr.append(el("th", null, name));
    out.append(tr);
    for (const cells of rows) {
      const line = el("tr");
      cells.forEach((value, i) => line.append(el("td", i === cells.length - 1 ? "msg" : null,
        value === null || value === undefined ? "" : value)));
      out.append(line);
    }
    return out;
  }

  async function showDetail(key) {
    state.open = key;
    $("detail").hidden = false;
    $("d-title").textContent = key;
    const full = await detailOf(key);
    if (state.open !== key) return;
    const body = $("d-body");
    if (!full) {
      body.replaceChildren(el("p", null, `${key} is not shown (deleted, or not readable).`));
      return;
    }
    const ready = full.ready ? `${full.ready.status} / ${full.ready.reason}` +
      (full.ready.message ? ` \u2014 ${full.ready.message}` : "") : null;
    const track = el("div", "track");
    drawCells(track, full, true);
    const runs = full.cells_detail.map((c) => [
      when(c.scheduled), c.result || c.kind, c.start ? when(c.start) : "",
      c.duration === null || c.duration === undefined ? "" : span(c.duration),
      c.delay === null || c.delay === undefined ? "" : span(c.delay) + (c.late ? " late" : ""),
      c.job || c.workflowId || "", [c.reason, c.message].filter(Boolean).join(": "),
    ]).reverse();
    body.replaceChildren(
      facts([
        ["state", full.state], ["backend", full.backend], ["backend object", backendObject(full.backendRef)],
        ["schedule", `${full.schedule} (${full.zone})`], ["Ready", ready],
        ["maxRunDuration", full.maxRun ? span(full.maxRun) : "none"],
        ["missed / skipped", `${full.missed} / ${full.skipped}`],
        ["failures in a row", full.failures], ["unseen runs", full.unseen || null],
        ["labels", Object.entries(full.labels).map(([k, v]) => `${k}=${v}`).join(", ")],
        ...full.marks.map((m) => [m.kind, m.note]),
      ]),
      el("h3", null, "Slots, oldest to newest, and the next runs"), track,
      el("h3", null, "Duration trend"), trend(full),
      el("h3", null, "Next runs"),
      el("p", null, full.nextAll.length ? full.nextAll.map(when).join(" \u00b7 ") : "none"),
      el("h3", null, "Runs and missed slots, newest first"),
      table(["scheduled", "result", "started", "duration", "start delay", "Job / workflow",
        "reason, message"], runs),
      el("h3", null, "Conditions"),
      table(["type", "status", "reason", "since", "message"],
        full.conditions.map((c) => [c.type, c.status, c.reason, when(c.since), c.message])),
    );
    if (full.requests.length) {
      body.append(el("h3", null, "Requests"), table(["kind", "id", "outcome", "message"],
        full.requests.map((r) => [r.kind, r.id, r.outcome, r.message])));
    }
    document.documentElement.dataset.detail = key;
  }

  function route() {
    const match = location.hash.match(/^#\/([^/]+)\/([^/]+)$/);
    if (match) {
      showDetail(`${decodeURIComponent(match[1])}/${decodeURIComponent(match[2])}`);
    } else {
      state.open = null;
      $("detail").hidden = true;
      delete document.documentElement.dataset.detail;
    }
  }

  // ---- wiring ------------------------------------------------------------------------------

  function legend() {
    const box = $("legend");
    for (const [kind, words] of KINDS) {
      const item = el("span");
      item.append(el("span", `cell k-${kind}`, ""), words);
      box.append(item);
    }
    const suspended = el("span");
    suspended.append(el("span", "cell k-suspended", "z"), "suspended / paused");
    const late = el("span");
    late.append(el("span", "cell k-succeeded late", ""), "late start");
    const next = el("span");
    next.append(el("span", "next"), "next run");
    box.append(suspended, late, next);
  }

  function start() {
    legend();
    readFilters();
    for (const name of ["ns", "backend", "state", "range"]) {
      $("f-" + name).addEventListener("change", () => filtersChanged(true, name !== "range"));
    }
    for (const name of ["q", "label"]) $("f-" + name).addEventListener("input", () => filtersChanged(false));
    $("filters").addEventListener("submit", (event) => event.preventDefault());
    $("viewport").addEventListener("scroll", scheduleRender, { passive: true });
    window.addEventListener("resize", scheduleRender);
    document.addEventListener("mouseover", (event) => {
      const target = event.target.closest("[data-key].cell, [data-key].mark, [data-key].next");
      if (target) hover(target); else if (hovered) unhover();
    });
    $("rows").addEventListener("click", (event) => {
      const row = event.target.closest(".row");
      if (!row) return;
      const [ns, name] = row.dataset.key.split("/");
      location.hash = `#/${encodeURIComponent(ns)}/${encodeURIComponent(name)}`;
    });
    $("detail").addEventListener("click", (event) => {
      if (event.target === $("detail")) location.hash = "";
    });
    document.addEventListener("keydown", (event) => {
      if (event.key === "Escape" && state.open) location.hash = "";
    });
    window.addEventListener("hashchange", route);
    setInterval(scheduleRender, 30000);  // "next in 4m" and the range's edge move with time
    connect();
    route();
  }

  start();
})();
