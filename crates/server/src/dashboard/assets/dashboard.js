// tollgate's dashboard: polls GET /v1/dashboard about once a second, the
// top offenders of every rule that refused anything (GET /v1/top), and
// answers the "why was this refused?" box with POST /v1/dashboard/peek.
// The admin token travels in the HttpOnly login cookie, never in a URL.
"use strict";

const POLL_MS = 1000;
const OFFENDERS = 5;
const offenders = new Map(); // "domain\u0000rule" -> [{key, refused, error, descriptor}]

function esc(value) {
  return String(value).replace(/[&<>"']/g, (c) => (
    { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
}

// Numbers for people: 950, 1.2k, 3.4M.
function count(n) {
  const units = [[1e9, "G"], [1e6, "M"], [1e3, "k"]];
  for (const [size, unit] of units) {
    if (n >= size) {
      const v = n / size;
      return (v < 10 ? v.toFixed(1).replace(/\.0$/, "") : Math.round(v)) + unit;
    }
  }
  if (n > 0 && n < 10 && !Number.isInteger(n)) return n.toFixed(n < 1 ? 2 : 1).replace(/\.?0+$/, "");
  return String(Math.round(n));
}

function rate(perSecond) {
  return count(perSecond) + "/s";
}

// Durations for people: 350 ms, 4.2 s, 3 min 20 s, 2 h 5 min, 1 d 3 h.
function duration(ms) {
  if (ms === null || ms === undefined) return "—";
  if (ms < 1000) return Math.round(ms) + " ms";
  const s = ms / 1000;
  if (s < 60) return (s < 10 ? s.toFixed(1).replace(/\.0$/, "") : Math.round(s)) + " s";
  const total = Math.round(s);
  const d = Math.floor(total / 86400), h = Math.floor(total % 86400 / 3600);
  const m = Math.floor(total % 3600 / 60), sec = total % 60;
  if (d > 0) return d + " d" + (h ? " " + h + " h" : "");
  if (h > 0) return h + " h" + (m ? " " + m + " min" : "");
  return m + " min" + (sec ? " " + sec + " s" : "");
}

function bytes(n) {
  const units = [[2 ** 30, "GiB"], [2 ** 20, "MiB"], [2 ** 10, "KiB"]];
  for (const [size, unit] of units) if (n >= size) return (n / size).toFixed(1) + " " + unit;
  return n + " B";
}

// Bars per sample, admitted (below) and refused (stacked above), the
// newest on the right; readable from the first sample on.
function sparkline(allowed, rejected, slots) {
  const width = 122, height = 28;
  const bar = width / slots;
  const max = Math.max(1, ...allowed.map((a, i) => a + (rejected[i] || 0)));
  const scale = (v) => v * (height - 2) / max;
  let bars = "";
  allowed.forEach((a, i) => {
    const x = ((slots - allowed.length + i) * bar).toFixed(1);
    const ha = scale(a), hr = scale(rejected[i] || 0);
    if (ha > 0) bars += '<rect class="a" x="' + x + '" y="' + (height - ha).toFixed(1) + '" width="' + bar.toFixed(1) + '" height="' + ha.toFixed(1) + '"/>';
    if (hr > 0) bars += '<rect class="r" x="' + x + '" y="' + (height - ha - hr).toFixed(1) + '" width="' + bar.toFixed(1) + '" height="' + hr.toFixed(1) + '"/>';
  });
  const label = "last 10 minutes: " + count(allowed.reduce((a, b) => a + b, 0)) + " allowed, "
    + count(rejected.reduce((a, b) => a + b, 0)) + " refused";
  return '<svg class="spark" viewBox="0 0 ' + width + " " + height + '" preserveAspectRatio="none" role="img" aria-label="'
    + esc(label) + '"><line class="base" x1="0" y1="' + (height - 0.5) + '" x2="' + width + '" y2="' + (height - 0.5) + '"/>'
    + bars + "</svg>";
}

function offendersOf(rule) {
  const list = offenders.get(rule.domain + "\u0000" + rule.rule);
  if (!list || list.length === 0) return '<span class="muted">—</span>';
  return '<ol class="offenders" data-rule="' + esc(rule.rule) + '">' + list.map((k) =>
    '<li data-key="' + esc(k.key) + '"><code title="' + esc(k.key) + '">'
    + esc(k.descriptor ? k.descriptor.map((e) => e.key + "=" + e.value).join(", ") : k.key) + "</code> "
    + '<span class="muted">' + count(k.refused) + (k.error ? " (±" + count(k.error) + ")" : "")
    + " refused</span></li>").join("") + "</ol>";
}

function ruleRow(rule, slots) {
  const badges = (rule.shadow ? '<span class="badge shadow-rejected">shadow</span>' : "")
    + (rule.per_value ? '<span class="badge" title="counted per value: these counts add them up; /metrics has one label per value">per value</span>' : "");
  const near = rule.near_limit_share === null ? "—" : Math.round(rule.near_limit_share * 100) + " %";
  return '<tr data-rule="' + esc(rule.rule) + '">'
    + '<td data-label="Rule"><div><code>' + esc(rule.rule) + "</code>" + badges
    + (rule.name ? '<br><span class="muted">' + esc(rule.name) + "</span>" : "")
    + (rule.source ? '<br><span class="muted">' + esc(rule.source) + "</span>" : "") + "</div></td>"
    + '<td data-label="Limit" class="limit"><div>' + rule.limits.map(esc).join("<br>") + "</div></td>"
    + '<td data-label="Allowed" class="num allowed" data-rate="' + rule.rates.allowed + '">'
    + rate(rule.rates.allowed) + "</td>"
    + '<td data-label="Refused" class="num rejected" data-rate="' + rule.rates.rejected + '">'
    + rate(rule.rates.rejected) + "</td>"
    + '<td data-label="Shadow" class="num shadow-rejected" data-rate="' + rule.rates.shadow_rejected + '">'
    + rate(rule.rates.shadow_rejected) + "</td>"
    + '<td data-label="Near limit" class="num">' + near + "</td>"
    + '<td data-label="Last 10 min">' + sparkline(rule.allowed_series, rule.rejected_series, slots) + "</td>"
    + '<td data-label="Top offenders (5 min)">' + offendersOf(rule) + "</td></tr>";
}

function renderRules(data) {
  const slots = 600 / data.sample_seconds + 1;
  const byDomain = new Map();
  for (const rule of data.rules) {
    const name = rule.domain === "" ? "inline limits" : rule.domain;
    if (!byDomain.has(name)) byDomain.set(name, []);
    byDomain.get(name).push(rule);
  }
  if (byDomain.size === 0) {
    document.getElementById("rules").innerHTML = '<p class="muted">No rules and no decisions yet.</p>';
    return;
  }
  const open = new Set([...document.querySelectorAll("details.domain:not([open])")]
    .map((d) => d.dataset.domain));
  let html = "";
  for (const [domain, rules] of byDomain) {
    html += '<details class="domain" data-domain="' + esc(domain) + '"' + (open.has(domain) ? "" : " open")
      + "><summary><h3>" + esc(domain) + '</h3> <span class="muted">' + rules.length
      + (rules.length === 1 ? " rule" : " rules") + "</span></summary>"
      + '<table class="rules"><thead><tr><th>Rule</th><th>Limit</th><th class="num">Allowed</th>'
      + '<th class="num">Refused</th><th class="num">Shadow</th><th class="num">Near limit</th>'
      + "<th>Last 10 min</th><th>Top offenders (5 min)</th></tr></thead><tbody>"
      + rules.map((r) => ruleRow(r, slots)).join("") + "</tbody></table></details>";
  }
  document.getElementById("rules").innerHTML = html;
}

function dl(pairs) {
  return pairs.map(([k, v]) => "<dt>" + esc(k) + "</dt><dd>" + v + "</dd>").join("");
}

function renderPanels(data) {
  const s = data.store;
  const health = s.status === "ready" ? '<span class="allowed">ready</span>'
    : '<span class="rejected">' + esc(s.status) + "</span>" + (s.error ? "<br>" + esc(s.error) : "");
  document.getElementById("store").innerHTML = dl([
    ["Kind", esc(s.kind) + (s.engine ? " (" + esc(s.engine) + " engine)" : "")],
    ["Health", health],
    ["Store errors", count(s.store_errors)],
    ["Memory", bytes(s.memory_used_bytes)],
  ]);
  const f = data.rules_file;
  const reload = f.last_reload;
  let reloaded = '<span class="muted">none since the start</span>';
  if (reload) {
    reloaded = duration(Math.max(0, data.now_ms - reload.at_ms)) + " ago, "
      + (reload.ok ? '<span class="allowed">loaded</span>'
        : '<span class="rejected">failed; previous rules kept</span><br><code class="error">'
          + esc(reload.error || "") + "</code>");
  }
  document.getElementById("rules-file").innerHTML = dl([
    ["Path", f.path ? "<code>" + esc(f.path) + "</code>" : '<span class="muted">no rules file</span>'],
    ["Last reload", reloaded],
  ]);
  renderOverrides(data.overrides);
  const routes = data.latency;
  document.getElementById("latency").innerHTML = routes.length === 0
    ? '<p class="muted">No decisions yet.</p>'
    : '<table><thead><tr><th>Route</th><th class="num">Decisions</th><th class="num">p50</th>'
      + '<th class="num">p90</th><th class="num">p99</th></tr></thead><tbody>'
      + routes.map((r) => "<tr><td>" + esc(r.route) + '</td><td class="num">' + count(r.count)
        + '</td><td class="num">' + micro(r.p50_ms) + '</td><td class="num">' + micro(r.p90_ms)
        + '</td><td class="num">' + micro(r.p99_ms) + "</td></tr>").join("") + "</tbody></table>";
}

// Runtime overrides: how many, and the first few of each domain.
function renderOverrides(o) {
  const box = document.getElementById("overrides");
  if (!o || o.count === 0) {
    box.innerHTML = '<p class="muted">None. Set one with <code>PUT /v1/overrides/{domain}</code>.</p>';
    return;
  }
  const limitOf = (item) => JSON.stringify(item.rate_limit || item.rate_limits || item.text || "");
  box.innerHTML = "<p>" + count(o.count) + " in all</p>" + o.domains.map((d) =>
    "<h3>" + esc(d.domain) + " · " + count(d.count) + "</h3><ul class=\"overrides\">"
      + d.first.map((item) => "<li><code>" + esc(item.entries.map((e) => e.key + "=" + e.value).join(", "))
        + "</code> " + esc(limitOf(item)) + "</li>").join("")
      + (d.count > d.first.length ? '<li class="muted">…</li>' : "") + "</ul>").join("");
}

// A latency bound in milliseconds, shown in µs below a millisecond.
function micro(msValue) {
  if (msValue === null) return "&gt; 41 ms";
  if (msValue < 1) return "≤ " + Math.round(msValue * 1000) + " µs";
  if (msValue < 10) return "≤ " + msValue.toFixed(2).replace(/\.?0+$/, "") + " ms";
  return "≤ " + duration(msValue);
}

async function fetchOffenders(data) {
  const refusing = data.rules.filter((r) => r.counts.rejected + r.counts.shadow_rejected > 0).slice(0, 50);
  await Promise.all(refusing.map(async (rule) => {
    const query = new URLSearchParams({ domain: rule.domain, rule: rule.rule, limit: String(OFFENDERS) });
    const answer = await fetch("/v1/top?" + query, { cache: "no-store" });
    if (answer.ok) offenders.set(rule.domain + "\u0000" + rule.rule, (await answer.json()).keys);
  }));
}

function setStatus(html) {
  document.getElementById("status").innerHTML = html;
}

async function poll() {
  try {
    const answer = await fetch("/v1/dashboard", { cache: "no-store" });
    if (answer.status === 401) {
      setStatus('<span class="rejected">Signed out: <a href="/dashboard">sign in again</a>.</span>');
      return;
    }
    if (!answer.ok) throw new Error("HTTP " + answer.status);
    const data = await answer.json();
    await fetchOffenders(data);
    renderRules(data);
    renderPanels(data);
    setStatus('<span class="muted">Updated ' + new Date(data.now_ms).toLocaleTimeString() + "</span>");
  } catch (error) {
    setStatus('<span class="rejected">Cannot reach the server (' + esc(error.message) + "); retrying.</span>");
  }
  setTimeout(poll, POLL_MS);
}

// "key=value, key=value" per line -> descriptors.
function descriptorsOf(text) {
  return text.split("\n").map((line) => line.trim()).filter((line) => line !== "").map((line) => ({
    entries: line.split(",").map((entry) => entry.trim()).filter((e) => e !== "").map((entry) => {
      const at = entry.indexOf("=");
      return at < 0 ? { key: entry, value: "" } : { key: entry.slice(0, at).trim(), value: entry.slice(at + 1).trim() };
    }),
  }));
}

function peekRequest() {
  const value = (id) => document.getElementById(id).value.trim();
  const cost = Number(value("peek-cost") || "1");
  const key = value("peek-key");
  if (key !== "") {
    const limit = { algorithm: value("peek-algorithm"), rate: value("peek-rate") };
    if (value("peek-burst") !== "") limit.burst = Number(value("peek-burst"));
    return { key, limit, cost };
  }
  return { domain: value("peek-domain"), descriptors: descriptorsOf(document.getElementById("peek-descriptors").value), cost };
}

function renderPeek(answer) {
  const rows = answer.limits.map((l) => {
    if (!l.matched) {
      return '<tr data-matched="false"><td>' + (l.descriptor + 1) + '</td><td colspan="5" class="muted">no rule matches this descriptor: not limited</td></tr>';
    }
    const state = l.unlimited ? '<span class="allowed">unlimited</span>'
      : l.retry_after_ms === 0 ? '<span class="allowed">would pass</span>'
      : l.retry_after_ms === null ? (l.remaining >= answer.cost ? '<span class="allowed">would pass</span>' : '<span class="rejected">would be refused</span>')
      : '<span class="rejected">wait ' + duration(l.retry_after_ms) + "</span>";
    return '<tr data-rule="' + esc(l.rule || "inline") + '" data-remaining="' + esc(l.remaining)
      + '" data-retry-after-ms="' + esc(l.retry_after_ms) + '">'
      + "<td>" + (l.descriptor === null ? "inline" : l.descriptor + 1) + "</td>"
      + "<td><code>" + esc(l.rule || l.name || "") + "</code>"
      + (l.shadow ? '<span class="badge shadow-rejected">shadow</span>' : "")
      + (l.quota ? '<span class="badge" title="refuses only when every quota rule of the request does">quota</span>' : "") + "</td>"
      + "<td>" + esc(l.description || "") + "</td>"
      + '<td class="num">' + (l.remaining === null ? "—" : count(l.remaining) + " of " + count(l.limit)) + "</td>"
      + '<td class="num">' + duration(l.reset_after_ms) + "</td>"
      + "<td>" + state + "</td></tr>";
  }).join("");
  return '<p class="verdict ' + (answer.allowed ? "allowed" : "rejected") + '">'
    + (answer.allowed ? "A request of cost " + answer.cost + " would be admitted now."
      : "A request of cost " + answer.cost + " would be refused now.") + "</p>"
    + '<table><thead><tr><th>Descriptor</th><th>Rule</th><th>Limit</th><th class="num">Remaining</th>'
    + '<th class="num">Resets in</th><th>Retry after</th></tr></thead><tbody>' + rows + "</tbody></table>";
}

async function peek(event) {
  if (event) event.preventDefault();
  const out = document.getElementById("peek-result");
  out.dataset.state = "asking";
  try {
    const answer = await fetch("/v1/dashboard/peek", {
      method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(peekRequest()),
    });
    const body = await answer.json();
    if (answer.ok) {
      out.innerHTML = renderPeek(body);
      out.dataset.allowed = String(body.allowed);
    } else {
      out.innerHTML = '<p class="error">' + esc(body.error ? body.error.message : "HTTP " + answer.status) + "</p>";
    }
  } catch (error) {
    out.innerHTML = '<p class="error">Cannot reach the server (' + esc(error.message) + ").</p>";
  }
  out.dataset.state = "done";
}

// #peek&domain=api&descriptors=user%3D42 (or key=…&algorithm=…&rate=…)
// fills the box and asks at once: a link to an answer. Not a token.
function peekFromFragment() {
  const hash = location.hash;
  if (!hash.startsWith("#peek")) return;
  const params = new URLSearchParams(hash.slice("#peek".length).replace(/^&/, ""));
  const fields = { domain: "peek-domain", descriptors: "peek-descriptors", key: "peek-key",
    algorithm: "peek-algorithm", rate: "peek-rate", burst: "peek-burst", cost: "peek-cost" };
  for (const [name, id] of Object.entries(fields)) {
    if (params.has(name)) document.getElementById(id).value = params.get(name);
  }
  peek();
}

document.getElementById("peek-form").addEventListener("submit", peek);
window.addEventListener("hashchange", peekFromFragment);
peekFromFragment();
poll();
