"use strict";
// The overview's Workers panel: the live workers of the prefix (GET /workers), and the types
// with events due that no running worker handles. Everything from Redis is set as text.

function renderWorkers(listing) {
  const unattended = document.getElementById("unattended");
  unattended.replaceChildren(...listing.unattended.map((item) => {
    const line = document.createElement("li");
    line.dataset.type = item.type;
    line.textContent = `${item.type}: ${item.waiting} events due and no running worker ` +
      "handles it";
    return line;
  }));
  const body = document.querySelector("#workers tbody");
  body.replaceChildren();
  if (!listing.workers.length) {
    const td = cell(body.insertRow(), "no live workers under prefix " + listing.prefix, "empty");
    td.colSpan = 7;
  }
  for (const worker of listing.workers) {
    const row = body.insertRow();
    row.dataset.id = worker.id;
    cell(row, worker.host, "", "host");
    cell(row, String(worker.pid), "num", "pid");
    cell(row, worker.state, worker.state === "running" ? "" : "error", "state");
    cell(row, worker.version, "", "version");
    cell(row, moment(worker.started_at), "", "started_at");
    cell(row, seconds(worker.beat_age) + " ago", "num", "beat_age");
    cell(row, worker.handlers.map(
      (handler) => `${handler.type} ${handler.in_hand}/${handler.parallelism}`).join(", "),
      "", "handlers");
  }
}
