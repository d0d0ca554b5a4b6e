(function () {
  "use strict";
  var root = document.documentElement;
  var records = JSON.parse(document.getElementById("records").textContent);
  var main = document.getElementById("main");
  var form = document.getElementById("filters");
  var panel = document.getElementById("details");
  var search = document.getElementById("search");
  var counter = document.getElementById("search-count");
  var sections = Array.prototype.slice.call(main.querySelectorAll("section.sec"));
  function each(list, fn) { Array.prototype.forEach.call(list, fn); }
  function parsed(tr, name) { var v = tr.getAttribute(name); return v ? JSON.parse(v) : []; }
  function plural(n, one, many) { return n.toLocaleString("en-US") + " " + (n === 1 ? one : many); }

  // Every row of every table of the report: what the filters and the search act on.
  var rows = [];
  each(main.querySelectorAll("table"), function (table) {
    var matrix = table.classList.contains("matrix");
    var section = table.closest("section.sec");
    each(table.tBodies, function (body) {
      each(body.rows, function (tr) {
        rows.push({tr: tr, table: table, matrix: matrix, section: section, suites: parsed(tr, "data-suites"),
                   targets: parsed(tr, "data-targets"), keys: parsed(tr, "data-keys"),
                   filtered: false, missed: false, text: null});
      });
    });
  });

  // ---- filters: suite, target and result, on every table
  function selected(name) {
    var on = Object.create(null);
    each(form.querySelectorAll("input[name=" + name + "]"), function (box) { on[box.value] = box.checked; });
    return on;
  }
  function anyOn(values, on) {
    return values.length === 0 || values.some(function (v) { return on[v] !== false; });
  }

  function showColumns(table, targets) {
    var shown = [];
    each(table.querySelectorAll("thead [data-target]"), function (cell) {
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

  function filter() {
    var suites = selected("suite"), targets = selected("target"), keys = selected("key");
    var columns = new Map();
    each(main.querySelectorAll("table.matrix"), function (table) { columns.set(table, showColumns(table, targets)); });
    rows.forEach(function (row) {
      var ok = anyOn(row.suites, suites);
      if (row.matrix) {
        var shown = columns.get(row.table), keyed = false, match = false;
        each(row.tr.cells, function (td) {
          var key = td.getAttribute("data-k");
          td.hidden = shown[td.cellIndex] === false;
          keyed = keyed || !!key;
          match = match || (!!key && !td.hidden && keys[key] !== false);
        });
        ok = ok && (!keyed || match);
      } else {
        ok = ok && anyOn(row.targets, targets) && anyOn(row.keys, keys);
      }
      row.filtered = !ok;
    });
  }

  // ---- search: every row's text, the hover text of its cells and the records behind them
  function textOf(row) {
    if (row.text === null) {
      var parts = [row.tr.textContent];
      each(row.tr.cells, function (td) {
        if (td.title) { parts.push(td.title); }
        var i = td.getAttribute("data-i");
        if (i !== null) {
          var rec = records[Number(i)];
          parts.push(rec.check, rec.column, rec.reason);
        }
      });
      row.text = parts.join("\n").toLowerCase();
    }
    return row.text;
  }

  var openedBySearch = [];
  var searching = false;

  function refresh() {
    var words = search.value.trim().toLowerCase().split(/\s+/).filter(Boolean);
    var total = 0, matched = 0, hit = new Set();
    rows.forEach(function (row) {
      row.missed = words.length > 0 && !words.every(function (w) { return textOf(row).indexOf(w) >= 0; });
      row.tr.hidden = row.filtered || row.missed;
      if (!row.filtered) { total += 1; }
      if (!row.tr.hidden) { matched += 1; hit.add(row.section); }
    });
    document.getElementById("shown").textContent =
      total.toLocaleString("en-US") + " of " + plural(rows.length, "table row", "table rows") + " shown";
    if (words.length) {
      searching = true;
      sections.forEach(function (sec) {
        sec.hidden = !hit.has(sec);
        var fold = sec.querySelector(":scope > details");
        if (!sec.hidden && fold && !fold.open) { fold.open = true; openedBySearch.push(fold); }
      });
      counter.textContent = matched === 0 ? "no row matches"
        : plural(matched, "row matches", "rows match") + " in " + plural(hit.size, "section", "sections");
    } else {
      if (searching) {
        sections.forEach(function (sec) { sec.hidden = false; });
        openedBySearch.forEach(function (fold) { fold.open = false; });
        openedBySearch = [];
        searching = false;
      }
      counter.textContent = "";
    }
    counter.setAttribute("data-count", words.length ? String(matched) : "");
    counter.setAttribute("data-query", search.value);
    return rows.length;
  }

  var pending = null;
  search.addEventListener("input", function () {
    clearTimeout(pending);
    pending = setTimeout(refresh, 120);
  });
  search.addEventListener("keydown", function (ev) {
    if (ev.key === "Escape") { search.value = ""; refresh(); }
  });
  form.addEventListener("change", function () { filter(); refresh(); });
  document.getElementById("filters-reset").addEventListener("click", function () {
    each(form.querySelectorAll("input"), function (box) { box.checked = true; });
    filter();
    refresh();
  });

  // ---- links inside the page: open the folds on the way to the target
  function reveal(id) {
    var target = document.getElementById(id);
    if (!target) { return; }
    if (target.closest("section.sec[hidden]")) { search.value = ""; refresh(); }
    for (var d = target.closest("details"); d; d = d.parentElement && d.parentElement.closest("details")) {
      d.open = true;
    }
    var own = target.matches("section.sec") && target.querySelector(":scope > details");
    if (own) { own.open = true; }
  }
  window.addEventListener("hashchange", function () { reveal(decodeURIComponent(location.hash.slice(1))); });

  // ---- the details panel: every metric of a clicked result
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

  document.addEventListener("click", function (ev) {
    if (!ev.target.closest) { return; }
    var link = ev.target.closest("a[href^='#']");
    if (link) {
      reveal(decodeURIComponent(link.getAttribute("href").slice(1)));
      root.classList.remove("toc-open");
      return;
    }
    var td = ev.target.closest("td[data-i]");
    if (td) { showRecord(records[Number(td.getAttribute("data-i"))]); }
  });
  document.getElementById("details-close").addEventListener("click", function () { panel.hidden = true; });
  document.getElementById("toc-toggle").addEventListener("click", function () { root.classList.toggle("toc-open"); });
  document.addEventListener("keydown", function (ev) {
    if (ev.key === "Escape") { panel.hidden = true; root.classList.remove("toc-open"); }
  });

  filter();
  root.setAttribute("data-table-rows", String(refresh()));
  if (location.hash) {
    reveal(decodeURIComponent(location.hash.slice(1)));
    var target = document.getElementById(decodeURIComponent(location.hash.slice(1)));
    if (target) { target.scrollIntoView(); }
  }
  root.setAttribute("data-rendered", "yes");
}());
