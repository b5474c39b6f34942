// snapshotd ui: hash-routed views over the JSON API. Hand-written, no build step, no CDN.
"use strict";
const CSRF = document.querySelector('meta[name="csrf-token"]').content;
// Each view draws into a fresh element that replaces the page's only when the view is still
// the one asked for: a slow answer for a page already left never overwrites the current one.
const slot = document.getElementById("main");
let routeId = 0;
const COLORS = { hook: "#2f6fdf", wrap: "#168f8f", watch: "#7a9a3a", cli: "#8a4fd0",
                 outside: "#a0662a", restore: "#e08a00" };
let poll = null;

function h(tag, attrs, ...kids) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "cls") el.className = v;
    else el.setAttribute(k, v);
  }
  for (const kid of kids.flat()) if (kid !== null && kid !== undefined) el.append(kid);
  return el;
}
function svg(tag, attrs) {
  const el = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, v);
  return el;
}
const when = (t) => t ? new Date(t * 1000).toLocaleString() : "";
const enc = encodeURIComponent;
const gapTime = (g) => g.ts ? Date.parse(g.ts) / 1000 : 0;

async function api(path, params, body) {
  const url = path + (params ? "?" + new URLSearchParams(params) : "");
  const init = body === undefined ? {} : { method: "POST", body: JSON.stringify(body),
    headers: { "content-type": "application/json", "x-csrf-token": CSRF } };
  const res = await fetch(url, init);
  const data = await res.json().catch(() => ({ message: res.statusText }));
  if (!res.ok) throw new Error(data.message || res.statusText);
  return data;
}

// Polls for changes; ``seen`` is the version the page was drawn from, so a change between the
// drawing and the first poll is not missed.
function live(main, fetchVersion, rerender, seen) {
  main.startLive = () => setInterval(async () => {
    try {
      const v = await fetchVersion();
      if (v !== seen) { seen = v; rerender(); }
      document.getElementById("live").className = "on";
    } catch (e) { document.getElementById("live").className = "off"; }
  }, 2000);
}

// -- runs ----------------------------------------------------------------------------------------
async function runsView(main) {
  const data = await api("/api/runs");
  const rows = data.runs.map((r) => h("tr", { "data-run": r.run_id },
    h("td", {}, h("a", { href: "#/run/" + enc(r.run_id), cls: "run-link" }, r.run_id)),
    h("td", {}, r.agent || "—"),
    h("td", {}, r.worktrees.join(", ")),
    h("td", { cls: "state " + r.state }, r.state),
    h("td", { cls: "num" }, String(r.checkpoints)),
    h("td", { cls: "num" + (r.unresolved_gaps ? " bad" : "") }, String(r.gaps)),
    coverageCell(r.coverage),
    h("td", {}, when(r.last_activity)),
    h("td", {}, strip(r.strip))));
  main.replaceChildren(h("h1", {}, "Runs"),
    data.runs.length ? h("table", { cls: "runs" }, h("tr", {},
      ...["run", "agent", "worktree", "state", "checkpoints", "gaps", "coverage", "last activity",
          "activity"]
        .map((t) => h("th", {}, t))), rows)
      : h("p", {}, "Nothing captured yet: start an agent with the snapshotd hook."),
    data.truncated ? h("p", { cls: "note" }, `${data.runs.length} of ${data.total} runs`) : "");
  const key = (runs) => JSON.stringify(runs.map((r) => [r.run_id, r.checkpoints, r.gaps, r.state]));
  live(main, async () => key((await api("/api/runs")).runs), route, key(data.runs));
}
// Coverage (issue 43): tool calls captured as theirs of those seen, and the open gaps.
function coverageCell(c) {
  if (!c) return h("td", { cls: "coverage" }, "—");
  const text = (c.tool_calls_seen ? `${c.tool_calls_captured}/${c.tool_calls_seen} ` +
    `(${c.percent} %)` : "no tool calls") + (c.gaps ? `, ${c.gaps} gap${c.gaps === 1 ? "" : "s"}` : "");
  return h("td", { cls: "coverage " + (c.complete && !c.gaps ? "complete" : "incomplete"),
                   title: c.summary }, text);
}
function coverageList(items) {
  return h("ul", { cls: "coverage" }, ...(items || []).map((c) => h("li", {
    cls: c.complete && !c.gaps ? "complete" : "incomplete" },
    `${c.node_id} · it ${c.iteration} · #${c.attempt}: ${c.summary}`)));
}
function strip(counts) {
  const max = Math.max(1, ...counts);
  const el = svg("svg", { width: 96, height: 16, class: "strip" });
  counts.forEach((c, i) => {
    const ht = c ? 2 + 14 * c / max : 0;
    el.append(svg("rect", { x: i * 4, y: 16 - ht, width: 3, height: ht }));
  });
  return el;
}

// -- timeline ------------------------------------------------------------------------------------
function timeline(data, onPick, current) {
  const total = Math.max(800, slot.clientWidth - 40), lane = 26, left = 200;
  const width = total - left - 16;
  const times = data.checkpoints.map((c) => c.created_at)
    .concat(data.gaps.map(gapTime).filter((t) => t));
  const t0 = Math.min(...times), t1 = Math.max(...times), span = Math.max(t1 - t0, 1e-3);
  const x = (t) => left + 8 + (width - 16) * ((t - t0) / span);
  const el = svg("svg", { width: total, height: lane * (data.lanes.length + 1) + 10,
                          class: "timeline" });
  data.lanes.forEach((l, i) => {
    const label = svg("text", { x: 4, y: lane * i + 17, class: "lane-label" });
    label.textContent = `${l.node_id} · it ${l.iteration} · #${l.attempt} (${l.state})`;
    el.append(svg("line", { x1: left, x2: left + width, y1: lane * i + 13, y2: lane * i + 13,
                            class: "lane-line" }), label);
  });
  for (const c of data.checkpoints) {
    const l = data.lanes[c.lane], cx = x(c.created_at), cy = c.lane * lane + 13;
    const safety = c.source === "restore";
    const mark = svg(safety ? "polygon" : "rect", safety
      ? { points: `${cx},${cy - 8} ${cx + 6},${cy} ${cx},${cy + 8} ${cx - 6},${cy}` }
      : { x: cx - 3, y: cy - 8, width: 6, height: 16 });
    const isCur = current && current.node === l.node_id && current.seq === c.seq &&
      current.iteration === l.iteration && current.attempt === l.attempt;
    mark.setAttribute("class", "mark" + (safety ? " safety" : "") + (c.pruned_at ? " pruned" : "") +
      (isCur ? " current" : "") + (c.tier === 2 ? " tier2" : ""));
    mark.setAttribute("fill", COLORS[c.source] || "#555");
    mark.setAttribute("data-seq", c.seq);
    mark.setAttribute("data-lane", c.lane);
    const title = svg("title"), call = c.tool_call;
    title.textContent = `seq ${c.seq} · ${c.source}, tier ${c.tier}\n` +
      `${(call && call.label) || c.label || "(no label)"}` +
      (c.events || []).map((e) => `\n${e.kind}: ${e.label || e.id}`).join("") +
      `${call ? "\ntool call " + call.id + howText(call) : ""}\n+${c.added} ~${c.modified} ` +
      `-${c.deleted} · ${when(c.created_at)}${safety ? "\nrestore safety point" : ""}`;
    mark.append(title);
    mark.addEventListener("click", () => onPick(l, c));
    el.append(mark);
  }
  for (const g of data.gaps) {
    const i = data.lanes.findIndex((l) => l.node_id === g.node_id);
    const cy = (i < 0 ? data.lanes.length : i) * lane + 13, cx = x(gapTime(g) || t1);
    const mark = svg("circle", { cx, cy, r: 5, class: "gap" + (g.resolved ? " resolved" : "") });
    const title = svg("title");
    title.textContent = `gap: ${g.reason}${g.resolved ? " (resolved)" : ""}\n${g.detail || ""}` +
      `\nwhat to do: ${g.help.todo}`;
    mark.append(title);
    el.append(mark);
  }
  return h("div", { cls: "timeline-wrap" }, el, legend());
}
function legend() {
  return h("p", { cls: "legend" }, ...Object.entries(COLORS).map(([k, c]) => {
    const sw = h("span", { cls: "swatch" }); sw.style.background = c;
    return h("span", {}, sw, k);
  }), h("span", {}, h("span", { cls: "swatch gapsw" }), "gap"), h("span", {}, "◆ restore safety point"));
}
const cpHash = (run, l, seq, q) => `#/cp/${enc(run)}/${enc(l.node_id)}/${l.iteration}/` +
  `${l.attempt}/${seq}` + (q ? "?" + new URLSearchParams(q) : "");

// How a checkpoint is a tool call's ("own": its capture), and how the call ended.
const HOW = { "in-flight": " (in flight)", "inferred": " (inferred)" };
const howText = (call) => HOW[call.how] || "";
const outcomeText = (call) => call.failed
  ? "FAILED" + (call.exit_code !== null && call.exit_code !== undefined ? ` (exit ${call.exit_code})` : "") +
    (call.error ? ": " + call.error : "") : "";
// Every tool call of the run as text: by label and id, with the checkpoints it owns.
function toolCalls(run, data) {
  const rows = data.tool_calls.map((t) => {
    const l = data.lanes[t.lane];
    const seqs = t.seqs.map((s) => h("a", { href: cpHash(run, l, s) }, `seq ${s}`));
    const held = t.held_at === null || t.held_at === undefined ? null
      : h("a", { href: cpHash(run, l, t.held_at) }, `= seq ${t.held_at}`);
    return h("tr", { cls: "toolcall" + (t.failed ? " bad" : "") },
      h("td", { cls: "label" }, (t.kind ? t.kind + ": " : "") + (t.label || "(no label)")),
      h("td", {}, h("code", { cls: "call-id" }, t.id),
        t.aliases.length ? h("small", {}, " also " + t.aliases.join(", ")) : null),
      h("td", {}, ...seqs.flatMap((a, i) => (i ? [", ", a] : [a])), howText(t),
        held ? [seqs.length ? " " : "", held] : null),
      h("td", {}, outcomeText(t)));
  });
  return [h("h2", {}, "Tool calls ", h("small", {}, `${data.tool_calls.length}`)),
    rows.length ? h("table", { id: "toolcalls", cls: "toolcalls" }, h("tr", {},
      ...["tool call", "id", "checkpoints", "outcome"].map((t) => h("th", {}, t))), rows)
      : h("p", { cls: "note" }, "No tool call recorded in this run.")];
}

async function runView(main, run) {
  const data = await api("/api/run", { run });
  main.replaceChildren(h("h1", {}, "Run ", h("code", {}, run)),
    h("p", {}, `${data.checkpoints.length} checkpoints, ${data.gaps.length} gaps, `,
      h("a", { href: "#/gaps/" + enc(run) }, "gaps and what to do")),
    coverageList(data.coverage),
    timeline(data, (l, c) => { location.hash = cpHash(run, l, c.seq); }),
    ...toolCalls(run, data), eventList(run, data));
  live(main, async () => (await api("/api/version", { run })).version, route, data.version);
}
// snapshotd's own events (a restore, a purge), each at the seq that holds the state after it,
// listed even when its checkpoints deduplicated onto earlier ones.
function eventList(run, data) {
  const items = data.checkpoints.flatMap((c) => (c.events || []).map((e) =>
    h("li", {}, h("a", { href: cpHash(run, data.lanes[c.lane], c.seq) }, `seq ${c.seq}`), " ",
      e.label || e.kind, " ", h("code", {}, e.id))));
  return items.length ? h("div", { cls: "events" }, h("h2", {}, "Events"),
    h("ul", { id: "events" }, ...items)) : "";
}

// -- checkpoint and diff -------------------------------------------------------------------------
async function checkpointView(main, run, node, iteration, attempt, seq, q) {
  const sel = { run, node, iteration, attempt, seq };
  const against = q.get("against"), mode = q.get("mode") || "unified";
  const params = Object.assign({}, sel);
  if (against) {
    const [an, ai, aa, as] = against.split("/").map(decodeURIComponent);
    Object.assign(params, { a_node: an, a_iteration: ai, a_attempt: aa, a_seq: as });
  }
  const [info, data, diff] = await Promise.all([api("/api/checkpoint", sel),
    api("/api/run", { run }), api("/api/diff", params)]);
  const cp = info.checkpoint, cur = { node, iteration: +iteration, attempt: +attempt, seq: +seq };
  const pick = (l, c) => {
    const nq = new URLSearchParams(q);
    nq.set("against", [l.node_id, l.iteration, l.attempt, c.seq].map(enc).join("/"));
    location.hash = cpHash(run, { node_id: node, iteration, attempt }, seq, nq);
  };
  const modeLink = (m) => { const nq = new URLSearchParams(q); nq.set("mode", m);
    return h("a", { href: cpHash(run, { node_id: node, iteration, attempt }, seq, nq),
                    cls: m === mode ? "on" : "" }, m); };
  const from = diff.from ? `seq ${diff.from.seq} (${diff.from.node_id} #${diff.from.attempt})`
    : "the previous checkpoint";
  main.replaceChildren(
    h("h1", {}, `Checkpoint ${cp.seq} `, h("small", {}, `${run} / ${node} · iteration ${iteration}` +
      ` · attempt ${attempt}`)),
    h("dl", { cls: "facts" }, h("dt", {}, "tool call"), h("dd", { id: "toolcall" },
      (cp.tool_call && cp.tool_call.label) || cp.label || "(no label)",
      cp.tool_call ? h("code", {}, " " + cp.tool_call.id) : null,
      cp.tool_call ? howText(cp.tool_call) : "",
      cp.tool_call && cp.tool_call.failed ? h("span", { cls: "error" }, " " + outcomeText(cp.tool_call)) : null,
      ...(cp.tool_calls || []).map((t) => h("div", { cls: "held" }, "= ",
        (t.kind ? t.kind + ": " : "") + (t.label || "(no label)"), h("code", {}, " " + t.id),
        " (its capture found this checkpoint's state)", t.failed ? " " + outcomeText(t) : ""))),
      h("dt", {}, "source"), h("dd", {}, `${cp.source}, tier ${cp.tier}`),
      h("dt", {}, "when"), h("dd", {}, when(cp.created_at)),
      h("dt", {}, "commit"), h("dd", {}, h("code", {}, cp.commit.slice(0, 12)))),
    h("p", {}, h("a", { href: `#/tree/${enc(run)}/${enc(node)}/${iteration}/${attempt}/${seq}/` },
      "browse the tree at this checkpoint"), " · ",
      h("a", { href: "#/run/" + enc(run) }, "back to the run")),
    h("p", { cls: "hint" }, "Click a mark to compare this checkpoint with it."),
    timeline(data, pick, cur),
    actionsPanel(sel, cp.tool_call && cp.tool_call.id),
    h("h2", { id: "diff-title" }, `Diff against ${from}`, " ",
      against ? h("a", { href: cpHash(run, { node_id: node, iteration, attempt }, seq) },
        "(back to previous)") : null, " ", modeLink("unified"), " ", modeLink("split")),
    h("p", {}, `${diff.stats.files_changed} files, +${diff.stats.insertions} ` +
      `-${diff.stats.deletions}`, diff.patch_truncated ? " (patch cut: too large)" : ""),
    fileList(diff.files, sel), renderPatch(diff.patch, mode));
}
function fileList(files, sel) {
  return h("ul", { cls: "files" }, files.map((f) => h("li", {}, h("span", { cls: "st st-" + f.status },
    f.status), " ", h("a", { href: "#/blame/" + [sel.run, sel.node, sel.iteration, sel.attempt,
      sel.seq].map(enc).join("/") + "/" + enc(f.path) }, f.path),
    f.old_path ? ` (from ${f.old_path})` : "", ` +${f.additions} -${f.deletions}`)));
}
function renderPatch(patch, mode) {
  const out = h("div", { cls: "diff " + mode, id: "diff" });
  let table = null, path = "", left = [], right = [];
  const flush = () => {
    for (let i = 0; i < Math.max(left.length, right.length); i++)
      table.append(h("tr", {}, cell(left[i], "del"), cell(right[i], "add")));
    left = []; right = [];
  };
  const cell = (l, cls) => l === undefined ? [h("td", { cls: "ln" }), h("td", { cls: "empty" })]
    : [h("td", { cls: "ln" }, l.n ? String(l.n) : ""), h("td", { cls: l.kind ? cls : "ctx" },
      HL(l.text, path))];
  let a = 0, b = 0;
  for (const raw of (patch || "").split("\n")) {
    if (raw === "" || raw.startsWith("\\")) continue;  // the final newline; "\ No newline"
    if (raw.startsWith("diff --git ")) {
      if (table && mode === "split") flush();
      path = raw.split(" b/").pop();
      table = h("table", { cls: "patch" });
      out.append(h("h3", {}, path), table);
    } else if (!table || /^(index |--- |\+\+\+ |new file|deleted file|similarity|rename |old mode|new mode|Binary)/.test(raw)) {
      if (table && raw.startsWith("Binary")) table.append(h("tr", {}, h("td", {}, raw)));
    } else if (raw.startsWith("@@")) {
      if (mode === "split") flush();
      const m = /-(\d+)(?:,\d+)? \+(\d+)/.exec(raw); a = +m[1]; b = +m[2];
      table.append(h("tr", { cls: "hunk" }, h("td", { colspan: 4 }, raw)));
    } else if (mode === "unified") {
      const k = raw[0], text = raw.slice(1);
      const cls = k === "+" ? "add" : k === "-" ? "del" : "ctx";
      table.append(h("tr", {}, h("td", { cls: "ln" }, k === "+" ? "" : String(a)),
        h("td", { cls: "ln" }, k === "-" ? "" : String(b)), h("td", { cls }, HL(text, path))));
      if (k !== "+") a++; if (k !== "-") b++;
    } else if (raw[0] === "-") left.push({ n: a++, text: raw.slice(1), kind: 1 });
    else if (raw[0] === "+") right.push({ n: b++, text: raw.slice(1), kind: 1 });
    else if (raw[0] === " ") { flush(); left.push({ n: a++, text: raw.slice(1) });
      right.push({ n: b++, text: raw.slice(1) }); flush(); }
  }
  if (table && mode === "split") flush();
  return out;
}
const HL = (text, path) => SDHighlight.line(text, path);

// -- restore and export --------------------------------------------------------------------------
function actionsPanel(sel, callId) {
  const box = h("div", { cls: "panel", id: "result" });
  const toDir = h("input", { id: "restore-to", placeholder: "empty: restore in place", size: 40 });
  const force = h("input", { type: "checkbox", id: "restore-force" });
  const branch = h("input", { id: "export-branch", placeholder: "new branch name", size: 24 });
  const body = () => Object.assign({}, sel, { iteration: +sel.iteration, attempt: +sel.attempt,
    seq: +sel.seq });
  const run = async (path, payload, show) => {
    box.replaceChildren(h("p", {}, "Working…"));
    try { show(await api(path, null, payload)); }
    catch (e) { box.replaceChildren(h("p", { cls: "error" }, e.message)); }
  };
  const restore = (confirm) => run("/api/restore", Object.assign(body(),
    { to_dir: toDir.value || null, force: force.checked, confirm }), (r) => showRestore(r, box,
    () => restore(true)));
  const revert = (scope, confirm) => run("/api/revert", Object.assign(body(),
    { scope, tool_call: callId || null, force: force.checked, confirm }), (r) => showRevert(r, box,
    () => revert(scope, true)));
  const exp = (confirm) => run("/api/export", Object.assign(body(), { branch: branch.value,
    confirm }), (r) => showExport(r, box, () => exp(true)));
  return h("div", { cls: "actions" },
    h("div", {}, h("b", {}, "Restore "), toDir, h("label", {}, force, " even if an agent is active"),
      " ", h("button", { id: "restore-preview", onclick: () => restore(false) }, "Preview restore")),
    h("div", {}, h("b", {}, "Undo (keeps later changes) "),
      callId ? h("button", { id: "revert-call-preview", onclick: () => revert("tool_call", false) },
        "Undo this tool call…") : null, " ",
      h("button", { id: "revert-seq-preview", onclick: () => revert("checkpoint", false) },
        "Undo this checkpoint…"), " ",
      h("button", { id: "revert-session-preview", onclick: () => revert("session", false) },
        "Undo this session…")),
    h("div", {}, h("b", {}, "Export "), branch, " ",
      h("button", { id: "export-preview", onclick: () => exp(false) }, "Preview export")), box);
}
function showRestore(r, box, confirm) {
  const where = r.target || r.worktree || r.to || "the worktree";
  const plan = h("ul", { cls: "plan" }, (r.plan || []).slice(0, 200).map((p) =>
    h("li", {}, h("span", { cls: "st st-" + p.op }, p.op), " " + p.path)));
  if (!r.confirmed) {
    box.replaceChildren(h("h3", {}, `Restore plan for seq ${r.seq} into ${where}`),
      h("p", {}, `add ${r.counts.A}, modify ${r.counts.M}, delete ${r.counts.D}` +
        (r.to ? "" : "; a safety checkpoint of the current state is taken first")), plan,
      h("button", { id: "restore-confirm", cls: "danger", onclick: confirm }, "Confirm restore"));
  } else {
    box.replaceChildren(h("h3", { id: "restore-done" }, `Restored seq ${r.seq} into ${where}`),
      h("p", {}, "Undo with: ", h("code", { id: "undo" }, r.undo_command || "(nothing to undo)")));
  }
}
function showRevert(r, box, confirm) {
  const rows = h("ul", { cls: "plan" }, (r.paths || []).slice(0, 200).map((p) =>
    h("li", {}, h("span", { cls: "st" }, p.status), " " + p.path +
      (p.status === "conflict" ? ` — ${p.reason}; now: ${(p.current || "").slice(0, 200)}; ` +
        `reverted: ${(p.reverted || "").slice(0, 200)}` : ""))));
  const c = r.counts || {};
  const summary = `${c.reverted || 0} reverted, ${c.merged || 0} merged, ` +
    `${c.conflict || 0} conflict(s), ${c.untouched || 0} untouched`;
  if (!r.confirmed) {
    box.replaceChildren(h("h3", {}, `Undo ${r.what} in ${r.target}`),
      h("p", {}, summary + (c.conflict ? "; with conflicts nothing would be written" :
        "; a safety checkpoint of the current state is taken first")), rows,
      c.conflict ? null : h("button", { id: "revert-confirm", cls: "danger", onclick: confirm },
        "Confirm undo"));
  } else if (r.refused) {
    box.replaceChildren(h("h3", { cls: "error" }, "Not undone: paths conflict; nothing was written"), rows);
  } else {
    box.replaceChildren(h("h3", { id: "revert-done" }, `Undid ${r.what}: ${summary}`),
      h("p", {}, "Undo with: ", h("code", { id: "undo" }, r.undo_command || "(nothing to undo)")));
  }
}
function showExport(r, box, confirm) {
  if (!r.confirmed) {
    box.replaceChildren(h("h3", {}, `Export to ${r.ref} in ${r.repo}`), h("p", {}, r.note),
      h("ul", { cls: "plan" }, r.checkpoints.map((c) => h("li", {}, `seq ${c.seq}: ${c.label || ""}`))),
      h("button", { id: "export-confirm", cls: "danger", onclick: confirm }, "Confirm export"));
  } else {
    box.replaceChildren(h("h3", { id: "export-done" }, `Exported ${r.commits.length} commits to ` +
      `${r.ref}`), h("p", {}, "Undo with: ", h("code", { id: "undo" }, r.undo_command)));
  }
}

// -- tree, blame, gaps ---------------------------------------------------------------------------
async function treeView(main, run, node, iteration, attempt, seq, path) {
  const sel = { run, node, iteration, attempt, seq };
  const t = await api("/api/tree", Object.assign({ path }, sel));
  const base = `#/tree/${[run, node, iteration, attempt, seq].map(enc).join("/")}/`;
  const up = path.split("/").slice(0, -1).join("/");
  const head = h("h1", {}, `${path || "/"} `, h("small", {}, `at checkpoint ${seq} of ${node}`));
  if (t.kind === "dir") {
    main.replaceChildren(head, h("ul", { cls: "tree" }, path ? h("li", {}, h("a", { href: base + up }, "..")) : null,
      t.entries.map((e) => h("li", {}, h("a", { href: base + (path ? path + "/" : "") + e.name },
        e.name + (e.dir ? "/" : ""))))));
  } else {
    const pre = h("table", { cls: "patch" });
    (t.text === null ? ["(binary file)"] : t.text.split("\n")).forEach((line, i) =>
      pre.append(h("tr", {}, h("td", { cls: "ln" }, String(i + 1)), h("td", { cls: "ctx" }, HL(line, path)))));
    main.replaceChildren(head, h("p", {}, h("a", { href: base + up }, "up"), " · ",
      h("a", { href: `#/blame/${[run, node, iteration, attempt, seq].map(enc).join("/")}/${enc(path)}` }, "blame")), pre);
  }
}
// Blame comes in pages (the server bounds a reply); "more lines" appends the next one.
const BLAME_PAGE = 2000;
async function blameView(main, run, node, iteration, attempt, seq, path) {
  const q = { run, node, iteration, attempt, seq, path, limit: BLAME_PAGE };
  const b = await api("/api/blame", Object.assign({ offset: 0 }, q));
  const l = { node_id: node, iteration, attempt };
  const rows = (lines) => lines.map((x) => h("tr", {},
    h("td", { cls: "ln" }, String(x.line)),
    h("td", { cls: "who" }, x.seq === null || x.seq === undefined ? x.source || "" :
      h("a", { href: cpHash(run, l, x.seq), title: x.tool_call
        ? `tool call ${x.tool_call.id}${howText(x.tool_call)}: ${x.tool_call.label || ""}`
        : x.label || "" }, `seq ${x.seq}`)),
    h("td", { cls: "ctx" }, HL(x.text, path))));
  const table = h("table", { cls: "patch blame" }, rows(b.lines));
  const status = h("p", { cls: "blame-count" });
  let shown = b.lines.length;
  const more = h("button", { id: "blame-more", onclick: async () => {
    more.disabled = true;
    const page = await api("/api/blame", Object.assign({ offset: shown }, q));
    table.append(...rows(page.lines));
    shown += page.lines.length;
    update();
  } }, "more lines");
  function update() {
    status.textContent = `lines 1-${shown} of ${b.total_lines}`;
    more.disabled = false;
    more.hidden = shown >= b.total_lines;
  }
  update();
  main.replaceChildren(h("h1", {}, "Blame ", h("code", {}, path), h("small", {}, ` at seq ${b.seq}`)),
    status, table, more);
}
async function gapsView(main, run) {
  const g = await api("/api/gaps", run ? { run } : {});
  main.replaceChildren(h("h1", {}, "Gaps", run ? ` of ${run}` : ""),
    h("p", {}, `${g.total} gaps, ${g.unresolved} unresolved`),
    h("table", { cls: "gaps" }, h("tr", {}, ["when", "run", "reason", "resolved", "what happened",
      "what to do", "detail"].map((t) => h("th", {}, t))),
    g.gaps.slice().reverse().map((x) => h("tr", { cls: x.resolved ? "resolved" : "bad" },
      h("td", {}, when(gapTime(x))), h("td", {}, x.run_id || ""),
      h("td", {}, h("code", {}, x.reason)), h("td", {}, x.resolved ? "yes" : "no"),
      h("td", {}, x.help.happened), h("td", {}, x.help.todo), h("td", {}, x.detail || "")))));
}

// -- routing -------------------------------------------------------------------------------------
async function route() {
  if (poll) { clearInterval(poll); poll = null; }
  const mine = ++routeId;
  const main = document.createElement("div");
  const [path, query] = location.hash.slice(1).split("?");
  const parts = path.split("/").filter((p, i) => i > 0).map(decodeURIComponent);
  const q = new URLSearchParams(query || "");
  try {
    if (parts[0] === "run") await runView(main, parts[1]);
    else if (parts[0] === "cp") await checkpointView(main, ...parts.slice(1, 6), q);
    else if (parts[0] === "tree") await treeView(main, ...parts.slice(1, 6), parts.slice(6).join("/"));
    else if (parts[0] === "blame") await blameView(main, ...parts.slice(1, 6), parts.slice(6).join("/"));
    else if (parts[0] === "gaps") await gapsView(main, parts[1]);
    else await runsView(main);
  } catch (e) {
    main.replaceChildren(h("p", { cls: "error" }, e.message));
  }
  if (mine !== routeId) return;
  slot.replaceChildren(...main.childNodes);
  if (main.startLive) poll = main.startLive();
}
window.addEventListener("hashchange", route);
route();
