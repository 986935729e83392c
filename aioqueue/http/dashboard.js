"use strict";
// The dashboard's overview (#/) and what both views share: the API calls, the tables, the
// charts, the buttons and the refresh loop. dashboard_type.js is the page of one type.
const params = new URLSearchParams(location.search);
const intervalMs = Math.max(200, 1000 * Number(params.get("interval") || 2));
const historySize = 150;
const history = [];  // {t, pending, ready, in_flight, dead, oldest_overdue}
const series = {
  depth: [["pending", "#3559e0"], ["ready", "#0e9f6e"], ["in_flight", "#d97706"],
          ["dead", "#c2410c"]],
  lateness: [["oldest_overdue", "#7c3aed"]],
  throughput: [["handled_per_s", "#0e9f6e"]],
};
let token = sessionStorage.getItem("aioqueue-token") || "";

async function api(path, options = {}) {
  const headers = {"Accept": "application/json"};
  if (token) headers["Authorization"] = "Bearer " + token;
  // The API takes writes in JSON only (a guard against cross-site requests).
  if (options.method && options.method !== "GET") headers["Content-Type"] = "application/json";
  const response = await fetch(path, {...options, headers});
  if (response.status === 401) {
    document.getElementById("auth").style.display = "flex";
    throw new Error("the API needs a token");
  }
  const body = await response.json();
  if (!response.ok && response.status !== 404 && response.status !== 409) {
    throw new Error(body.error || response.statusText);
  }
  return {status: response.status, body};
}

function cell(row, text, className, field) {
  const td = row.insertCell();
  td.textContent = text;
  if (className) td.className = className;
  if (field) td.dataset.field = field;
  return td;
}

// The body of the table `selector`, emptied; when `items` is empty, one row saying `empty`
// across its `columns`.
function emptiedBody(selector, items, empty, columns) {
  const body = document.querySelector(`${selector} tbody`);
  body.replaceChildren();
  if (!items.length) cell(body.insertRow(), empty, "empty").colSpan = columns;
  return body;
}

function seconds(value) {
  if (value < 1) return Math.round(value * 1000) + " ms";
  if (value < 120) return value.toFixed(1) + " s";
  return (value / 60).toFixed(1) + " min";
}

function renderQueues(stats) {
  // Records Redis holds that no tool can read: named as text, the other types still shown.
  const problems = document.getElementById("problems");
  problems.replaceChildren(...(stats.problems || []).map((problem) => {
    const item = document.createElement("li");
    item.textContent = problem;
    return item;
  }));
  const body = emptiedBody(
    "#queues", stats.types, "no event types registered under prefix " + stats.prefix, 8);
  for (const q of stats.types) {
    const row = body.insertRow();
    row.dataset.type = q.type;
    const name = cell(row, "", "", "type");
    const link = document.createElement("a");
    link.href = "#/types/" + encodeURIComponent(q.type);
    link.textContent = q.type;
    name.append(link);
    for (const field of ["pending", "due_now", "ready", "in_flight", "dead"]) {
      cell(row, String(q[field]), "num", field);
    }
    const late = cell(row, seconds(q.oldest_overdue), "num", "oldest_overdue");
    late.dataset.seconds = String(q.oldest_overdue);
    const delivery = cell(row, q.paused ? "paused " : "", "", "paused");
    const button = document.createElement("button");
    button.textContent = q.paused ? "Resume" : "Pause";
    button.className = "pause-toggle";
    button.addEventListener("click", () => togglePause(q, button));
    delivery.append(button);
  }
  const sum = (field) => stats.types.reduce((total, q) => total + q[field], 0);
  history.push({t: stats.server_time_ms, pending: sum("pending"), ready: sum("ready"),
                in_flight: sum("in_flight"), dead: sum("dead"),
                oldest_overdue: Math.max(0, ...stats.types.map((q) => q.oldest_overdue))});
  if (history.length > historySize) history.shift();
  drawChart("depth-chart", "depth-legend", series.depth);
  drawChart("lateness-chart", "lateness-legend", series.lateness);
}

// Lines of numbers only: the markup holds no text that came from Redis.
function drawChart(svgId, legendId, lines, samples = history) {
  const svg = document.getElementById(svgId);
  const width = svg.clientWidth || 500, height = svg.clientHeight || 160, pad = 6;
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  const top = Math.max(1, ...samples.flatMap((h) => lines.map(([field]) => h[field])));
  // Newest sample at the right edge; older ones scroll left.
  const step = (width - 2 * pad) / (historySize - 1);
  const x = (i) => width - pad - (samples.length - 1 - i) * step;
  const y = (v) => height - pad - (v * (height - 2 * pad)) / top;
  const label = lines[0][0] === "oldest_overdue" ? seconds(top) : top;
  let markup = `<text x="${pad}" y="14" font-size="11" fill="#6b7385">max ${label}</text>`;
  for (const [field, color] of lines) {
    const points = samples.map((h, i) => `${x(i).toFixed(1)},${y(h[field]).toFixed(1)}`);
    markup += `<polyline fill="none" stroke="${color}" stroke-width="2" ` +
              `points="${points.join(" ")}"/>`;
    if (samples.length) {
      const last = samples[samples.length - 1];
      markup += `<circle r="3" fill="${color}" cx="${x(samples.length - 1).toFixed(1)}" ` +
                `cy="${y(last[field]).toFixed(1)}"/>`;
    }
  }
  svg.innerHTML = markup;
  const legend = document.getElementById(legendId);
  const last = samples[samples.length - 1] || {};
  legend.innerHTML = "";
  for (const [field, color] of lines) {
    const item = document.createElement("span");
    item.innerHTML = `<i style="background:${color}"></i>`;
    const value = last[field] === undefined ? "" :
      field === "oldest_overdue" ? seconds(last[field]) : last[field];
    item.append(`${field.replaceAll("_", " ")} ${value}`);
    legend.append(item);
  }
}

function renderDeadLetters(listing) {
  const body = emptiedBody("#dead-letters", listing.dead_letters, "no dead letters", 6);
  for (const letter of listing.dead_letters) {
    const row = body.insertRow();
    row.dataset.type = letter.type;
    row.dataset.id = letter.id;
    cell(row, letter.type, "", "type");
    cell(row, letter.id, "", "id");
    cell(row, String(letter.attempts), "num", "attempts");
    cell(row, letter.died_at.replace("T", " ").slice(0, 19), "", "died_at");
    cell(row, letter.error, "error", "error");
    const button = document.createElement("button");
    button.textContent = "Requeue";
    button.className = "requeue";
    button.addEventListener("click", () => requeue(letter, button));
    row.insertCell().append(button);
  }
}

function renderTypes(listing) {
  const body = emptiedBody("#types", listing.types, "no event types", 3);
  for (const type of listing.types) {
    const row = body.insertRow();
    row.dataset.type = type.type;
    cell(row, type.type, "", "type");
    cell(row, type.digest || "none published", type.digest ? "" : "empty", "digest");
    // Names and types come from Redis: text nodes only, never markup.
    const optional = (f) => f.default === null || f.default === undefined ?
      " (optional)" : " = " + JSON.stringify(f.default);
    const fields = type.fields.map((f) => `${f.name}: ${f.type}${f.required ? "" : optional(f)}`);
    cell(row, fields.join(", "), "", "fields");
  }
}

// The status line of the view on screen.
function say(text, bad = false) {
  const message = document.getElementById(typeView.type === null ? "message" : "type-message");
  message.className = bad ? "bad" : "";
  message.textContent = text;
}

async function togglePause(queue, button) {
  button.disabled = true;
  const action = queue.paused ? "resume" : "pause";
  try {
    await api(`/types/${encodeURIComponent(queue.type)}/${action}`, {method: "POST"});
    say(`${queue.type}: ${action === "pause" ? "paused" : "resumed"}`);
  } catch (error) {
    say(String(error.message || error), true);
  }
  await refresh();
}

function renderSchedules(listing) {
  const body = emptiedBody("#schedules", listing.schedules, "no schedules", 6);
  const moment = (value) => value ? value.replace("T", " ").slice(0, 19) : "-";
  for (const schedule of listing.schedules) {
    const row = body.insertRow();
    row.dataset.name = schedule.name;
    cell(row, schedule.name, "", "name");
    cell(row, schedule.type, "", "type");
    cell(row, schedule.spec, "", "spec");
    cell(row, schedule.tz, "", "tz");
    // In the schedule's own zone, as its ticks are meant.
    cell(row, moment(schedule.next_tick), "", "next_tick");
    cell(row, moment(schedule.last_tick), "", "last_tick");
  }
}

async function requeue(letter, button) {
  await act(button, "POST", `/dead-letters/${encodeURIComponent(letter.type)}/` +
            `${encodeURIComponent(letter.id)}/requeue`, letter,
            (body) => [body.result, body.result === "requeued"]);
}

// One button's request; `outcome(body, status)` gives [what to say, whether it worked].
async function act(button, method, path, event, outcome) {
  button.disabled = true;
  try {
    const {status, body} = await api(path, {method});
    const [result, worked] = outcome(body, status);
    say(`${event.type} ${event.id}: ${result}`, !worked);
  } catch (error) {
    say(String(error.message || error), true);
  }
  await refresh();
}

function eventPath(type, id) {
  return `/events/${encodeURIComponent(type)}/${encodeURIComponent(id)}`;
}

function runNow(event, button) {
  return act(button, "POST", eventPath(event.type, event.id) + "/run-now", event,
             (body) => [body.result === "due" ? "due now" : body.result, body.result === "due"]);
}

function cancelEvent(event, button) {
  return act(button, "DELETE", eventPath(event.type, event.id), event,
             (body) => [body.cancelled ? "cancelled" : "not pending", body.cancelled]);
}

function button(label, className, onClick) {
  const element = document.createElement("button");
  element.type = "button";
  element.textContent = label;
  element.className = className;
  element.addEventListener("click", () => onClick(element));
  return element;
}

function moment(value) {
  return value ? value.replace("T", " ").slice(0, 19) : "-";
}


let refreshing = false, refreshAgain = false;
async function refresh() {
  if (refreshing) {
    refreshAgain = true;  // the view changed while a refresh ran: one more when it ends
    return;
  }
  refreshing = true;
  const status = document.getElementById("status");
  try {
    let stats;
    if (typeView.type !== null) {
      stats = await refreshType();
    } else {
      const [overview, dead, schedules, types, workers] = await Promise.all(
        [api("/stats"), api("/dead-letters?limit=100"), api("/schedules"), api("/types"),
         api("/workers")]);
      stats = overview.body;
      renderQueues(stats);
      renderWorkers(workers.body);
      renderDeadLetters(dead.body);
      renderSchedules(schedules.body);
      renderTypes(types.body);
    }
    if (!stats) return;
    const at = new Date(stats.server_time_ms).toISOString().replace("T", " ").slice(0, 19);
    status.textContent = `prefix ${stats.prefix} · ${at} UTC (server clock)`;
    status.dataset.serverTimeMs = String(stats.server_time_ms);
  } catch (error) {
    status.textContent = "error: " + (error.message || error);
  } finally {
    refreshing = false;
    if (refreshAgain) {
      refreshAgain = false;
      refresh();
    }
  }
}

document.getElementById("auth").addEventListener("submit", (event) => {
  event.preventDefault();
  token = document.getElementById("token").value;
  sessionStorage.setItem("aioqueue-token", token);
  document.getElementById("auth").style.display = "none";
  refresh();
});

// After dashboard_type.js (both are deferred, and run in order before this event).
document.addEventListener("DOMContentLoaded", () => {
  route();
  refresh();
  setInterval(refresh, intervalMs);
});
