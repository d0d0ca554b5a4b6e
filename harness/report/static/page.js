(function () {
  "use strict";
  var root = document.documentElement;
  var records = JSON.parse(document.getElementById("records").textContent);
  var form = document.getElementById("filters");
  var panel = document.getElementById("details");
  function each(list, fn) { Array.prototype.forEach.call(list, fn); }

  function selected(name) {
    var on = {};
    each(form.querySelectorAll("input[name=" + name + "]"), function (box) { on[box.value] = box.checked; });
    return on;
  }

  function showColumns(table, targets) {
    var shown = [];
    each(table.querySelectorAll("[data-target]"), function (cell) {
      cell.hidden = targets[cell.getAttribute("data-target")] === false;
    });
    each(table.querySelectorAll("tr.cols th"), function (th) { shown[th.cellIndex] = !th.hidden; });
    each(table.querySelectorAll("tr.hosts th[data-group]"), function (th) {
      var group = "tr.cols th[data-group='" + th.getAttribute("data-group") + "']:not([hidden])";
      var n = table.querySelectorAll(group).length;
      th.hidden = n === 0;
      if (n) { th.colSpan = n; }
    });
    return shown;
  }

  function filterTable(table, suites, targets, keys) {
    var shown = showColumns(table, targets);
    var suiteOn = suites[table.getAttribute("data-suite")] !== false;
    var count = 0;
    each(table.tBodies[0].rows, function (tr) {
      var keyed = false, match = false;
      each(tr.cells, function (td) {
        var key = td.getAttribute("data-k");
        td.hidden = shown[td.cellIndex] === false;
        keyed = keyed || !!key;
        match = match || (!!key && !td.hidden && keys[key] !== false);
      });
      tr.hidden = !suiteOn || (keyed && !match);
      count += tr.hidden ? 0 : 1;
    });
    return [count, table.tBodies[0].rows.length];
  }

  function apply() {
    var suites = selected("suite"), targets = selected("target"), keys = selected("key");
    var shown = 0, total = 0;
    each(document.querySelectorAll("table.matrix"), function (table) {
      var n = filterTable(table, suites, targets, keys);
      shown += n[0];
      total += n[1];
    });
    document.getElementById("shown").textContent = shown + " of " + total + " matrix rows shown";
    return total;
  }

  function addRow(table, name, value) {
    var tr = table.insertRow();
    var th = document.createElement("th");
    th.textContent = name;
    tr.appendChild(th);
    tr.insertCell().textContent = value === null || value === undefined ? "" : String(value);
  }

  function showRecord(rec) {
    var table = document.createElement("table");
    [["check", rec.check], ["column", rec.column], ["result", rec.result], ["category", rec.category],
     ["reason", rec.reason], ["duration s", rec.duration_s]].forEach(function (p) { addRow(table, p[0], p[1]); });
    addRow(table, "metrics", rec.metrics.length ? rec.metrics.length + " below" : "none");
    rec.metrics.forEach(function (p) { addRow(table, p[0], p[1]); });
    var body = panel.querySelector(".body");
    while (body.firstChild) { body.removeChild(body.firstChild); }
    body.appendChild(table);
    panel.hidden = false;
  }

  form.addEventListener("change", apply);
  document.getElementById("filters-reset").addEventListener("click", function () {
    each(form.querySelectorAll("input"), function (box) { box.checked = true; });
    apply();
  });
  document.addEventListener("click", function (ev) {
    var td = ev.target.closest && ev.target.closest("td[data-i]");
    if (td) { showRecord(records[Number(td.getAttribute("data-i"))]); }
  });
  document.getElementById("details-close").addEventListener("click", function () { panel.hidden = true; });
  document.addEventListener("keydown", function (ev) { if (ev.key === "Escape") { panel.hidden = true; } });
  root.setAttribute("data-matrix-rows", String(apply()));
  root.setAttribute("data-rendered", "yes");
}());
