// The tasks table follows the server's live stream: the server renders (and escapes) the
// rows; this only swaps them in.
"use strict";
(function () {
  const rows = document.getElementById("task-rows");
  const status = document.getElementById("live-status");
  if (!rows) return;
  const source = new EventSource("/events");
  source.addEventListener("tasks", (event) => { rows.innerHTML = event.data; });
  source.addEventListener("hello", () => { if (status) status.textContent = "Live."; });
  source.onerror = () => { if (status) status.textContent = "Live updates interrupted; retrying…"; };
})();
