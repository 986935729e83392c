"use strict";
// The page of one type (#/types/<type>[/<event id>]): its numbers, the due histogram, its
// charts, the schedule in due order and one event's detail. Everything from Redis is set as
// text.
const typeView = {type: null, eventId: null, cursor: null, nextCursor: null, history: [],
                  lastFinished: null};

function route() {
  const match = location.hash.match(/^#\/types\/([^/]+)(?:\/(.+))?$/);
  const type = match ? decodeURIComponent(match[1]) : null;
  if (type !== typeView.type) {
    Object.assign(typeView, {type, cursor: null, nextCursor: null, history: [],
                             lastFinished: null});
  }
  typeView.eventId = match && match[2] !== undefined ? decodeURIComponent(match[2]) : null;
  document.getElementById("overview").hidden = type !== null;
  document.getElementById("type-view").hidden = type === null;
  document.getElementById("type-name").textContent = type || "";
}

function renderTypeStats(stats) {
  const zero = {type: typeView.type, pending: 0, due_now: 0, ready: 0, in_flight: 0, dead: 0,
                oldest_overdue: 0, paused: false, finished: 0};
  const q = stats.types.find((entry) => entry.type === typeView.type) || zero;
  const body = document.querySelector("#type-stats tbody");
  body.replaceChildren();
  const row = body.insertRow();
  for (const field of ["pending", "due_now", "ready", "in_flight", "dead"]) {
    cell(row, String(q[field]), "num", field);
  }
  cell(row, seconds(q.oldest_overdue), "num", "oldest_overdue");
  const delivery = cell(row, q.paused ? "paused " : "", "", "paused");
  delivery.append(button(q.paused ? "Resume" : "Pause", "pause-toggle",
                         (element) => togglePause(q, element)));
  // Throughput from the count of successes the scripts keep, between two refreshes.
  const samples = typeView.history;
  const last = samples[samples.length - 1];
  const perSecond = last && typeView.lastFinished !== null && stats.server_time_ms > last.t ?
    Math.max(0, q.finished - typeView.lastFinished) * 1000 / (stats.server_time_ms - last.t) : 0;
  typeView.lastFinished = q.finished;
  samples.push({t: stats.server_time_ms, oldest_overdue: q.oldest_overdue,
                handled_per_s: Math.round(perSecond * 10) / 10});
  if (samples.length > historySize) samples.shift();
  drawChart("type-lateness-chart", "type-lateness-legend", series.lateness, samples);
  drawChart("type-throughput-chart", "type-throughput-legend", series.throughput, samples);
}

function renderHistogram(histogram) {
  const bars = document.getElementById("histogram");
  const top = Math.max(1, ...histogram.counts);
  const hours = histogram.bucket_ms / 3600000;
  bars.replaceChildren(...histogram.counts.map((count, index) => {
    const bar = document.createElement("div");
    bar.className = count ? "bar" : "bar zero";
    bar.style.height = `${Math.max(1, (100 * count) / top)}%`;
    bar.dataset.count = String(count);
    bar.title = `${count} due from +${index * hours} h`;
    return bar;
  }));
  const total = histogram.counts.reduce((sum, count) => sum + count, 0);
  document.getElementById("histogram-legend").textContent =
    `${total} due in the next ${histogram.counts.length * hours} h; most in one hour: ${top}`;
}

function renderPending(page) {
  const body = document.querySelector("#pending tbody");
  body.replaceChildren();
  if (!page.events.length) {
    // A page of a walk leaves out what moved since its first page, and may hold none of a
    // long run of such events while more follow (see pending_page in _engine/browse.py).
    const text = page.next_cursor ? "none here (events that moved since the first page are " +
                                    "left out): Next goes on" : "nothing scheduled";
    cell(body.insertRow(), text, "empty").colSpan = 6;
  }
  for (const entry of page.events) {
    const event = {type: typeView.type, id: entry.id};
    const row = body.insertRow();
    row.dataset.id = entry.id;
    if (entry.id === typeView.eventId) row.className = "selected";
    const link = document.createElement("a");
    link.href = `#/types/${encodeURIComponent(typeView.type)}/${encodeURIComponent(entry.id)}`;
    link.textContent = entry.id;
    cell(row, "", "", "id").append(link);
    cell(row, entry.state, "", "state");
    cell(row, moment(entry.due_at), "", "due_at");
    cell(row, String(entry.attempt), "num", "attempt");
    cell(row, String(entry.payload_bytes), "num", "payload_bytes");
    const actions = row.insertCell();
    actions.className = "actions";
    actions.append(button("Run now", "run-now", (element) => runNow(event, element)),
                   button("Cancel", "cancel", (element) => cancelEvent(event, element)));
  }
  typeView.nextCursor = page.next_cursor;
  document.getElementById("next-page").disabled = !page.next_cursor;
  document.getElementById("first-page").disabled = !typeView.cursor;
}

function renderDetail(response) {
  const section = document.getElementById("event-detail");
  section.hidden = typeView.eventId === null;
  if (typeView.eventId === null) return;
  document.getElementById("detail-id").textContent = typeView.eventId;
  const body = document.querySelector("#detail tbody");
  const actions = document.getElementById("detail-actions");
  body.replaceChildren();
  actions.replaceChildren();
  if (response.status === 404) {
    cell(body.insertRow(), "no such event: it was handled, cancelled, or never existed",
         "empty");
    return;
  }
  const info = response.body;
  const event = {type: info.type, id: info.id};
  const context = Object.entries(info.context || {}).map(([key, value]) => `${key} = ${value}`);
  const rows = [
    ["state", info.state], ["due at (UTC)", moment(info.due_at)],
    ["lease ends (UTC)", moment(info.lease_ends_at)], ["attempt", String(info.attempt)],
    ["retries left", String(info.retries_left ?? "-")], ["last error", info.last_error || "-"],
    ["died at (UTC)", moment(info.died_at)], ["context", context.join("\n") || "-"],
  ];
  for (const [name, value] of rows) {
    const row = body.insertRow();
    row.dataset.field = name.split(" ")[0];
    cell(row, name);
    cell(row, value, "", "value");
  }
  const payloadRow = body.insertRow();
  payloadRow.dataset.field = "payload";
  cell(payloadRow, "payload");
  const pre = document.createElement("pre");
  pre.className = "payload";
  pre.textContent = info.payload ?? "";
  payloadRow.insertCell().append(pre);
  if (info.state === "dead") {
    actions.append(button("Requeue", "requeue", (element) => requeue(event, element)));
  } else {
    actions.append(button("Run now", "run-now", (element) => runNow(event, element)),
                   button("Cancel", "cancel", (element) => cancelEvent(event, element)));
  }
}

async function refreshType() {
  const type = typeView.type, eventId = typeView.eventId;
  const t = encodeURIComponent(type);
  const cursor = typeView.cursor ? "&cursor=" + encodeURIComponent(typeView.cursor) : "";
  const requests = [api("/stats?type=" + t), api(`/types/${t}/histogram`),
                    api(`/events/${t}?limit=20${cursor}`)];
  if (eventId !== null) requests.push(api(eventPath(type, eventId)));
  const [stats, histogram, page, detail] = await Promise.all(requests);
  // Another view was opened meanwhile: the next refresh draws it.
  if (type !== typeView.type || eventId !== typeView.eventId) return;
  renderTypeStats(stats.body);
  renderHistogram(histogram.body);
  renderPending(page.body);
  renderDetail(detail);
  return stats.body;
}

document.getElementById("next-page").addEventListener("click", () => {
  typeView.cursor = typeView.nextCursor;
  refresh();
});
document.getElementById("first-page").addEventListener("click", () => {
  typeView.cursor = null;
  refresh();
});
window.addEventListener("hashchange", () => {
  route();
  refresh();
});
