// Sorting, filtering and folding for report.html; no network, no library.
(function () {
  "use strict";
  var form = document.getElementById("filters");
  var FIELDS = ["dataset", "domain", "model"];

  // A cell's sort key: its leading number when it has one, else its text.
  function key(cell) {
    var text = cell ? cell.textContent.trim() : "";
    var number = parseFloat(text);
    return isNaN(number) ? text.toLowerCase() : number;
  }

  function sortBy(th) {
    var table = th.closest("table"), body = table.tBodies[0];
    var column = Array.prototype.indexOf.call(th.parentNode.children, th);
    var ascending = th.getAttribute("aria-sort") !== "ascending";
    Array.prototype.forEach.call(th.parentNode.children, function (h) {
      h.removeAttribute("aria-sort");
    });
    th.setAttribute("aria-sort", ascending ? "ascending" : "descending");
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) {
      var x = key(a.cells[column]), y = key(b.cells[column]);
      if (typeof x !== typeof y) { x = String(x); y = String(y); }
      return (x < y ? -1 : x > y ? 1 : 0) * (ascending ? 1 : -1);
    });
    rows.forEach(function (row) { body.appendChild(row); });
  }

  // Hides every tagged element (row, column cell, block) of another dataset, domain or model,
  // and table rows without the text asked for.
  function apply(filters) {
    var tagged = document.querySelectorAll("[data-dataset], [data-domain], [data-model]");
    Array.prototype.forEach.call(tagged, function (el) {
      el.hidden = FIELDS.some(function (field) {
        var want = filters[field], have = el.getAttribute("data-" + field);
        return want && have !== null && have !== want;
      });
    });
    var text = (filters.text || "").toLowerCase(), shown = 0, total = 0;
    Array.prototype.forEach.call(document.querySelectorAll("tbody tr"), function (row) {
      var hiddenByTag = FIELDS.some(function (field) {
        var want = filters[field], have = row.getAttribute("data-" + field);
        return want && have !== null && have !== want;
      });
      row.hidden = hiddenByTag || (text && row.textContent.toLowerCase().indexOf(text) < 0);
      total += 1;
      if (!row.hidden && !row.closest("[hidden]")) { shown += 1; }
    });
    document.getElementById("shown").textContent = shown + " of " + total + " rows shown";
  }

  function filtersOfForm() {
    var out = {};
    FIELDS.concat(["text"]).forEach(function (field) { out[field] = form.elements[field].value; });
    return out;
  }

  // The fragment: #dataset=bbq&domain=bias&model=m&text=x&open=all|<pair id>
  function fromHash() {
    var params = new URLSearchParams(location.hash.replace(/^#/, ""));
    FIELDS.concat(["text"]).forEach(function (field) {
      if (params.has(field)) { form.elements[field].value = params.get(field); }
    });
    apply(filtersOfForm());
    var open = params.get("open");
    if (open) {
      Array.prototype.forEach.call(document.querySelectorAll("details.worst-pair"), function (d) {
        if (open === "all" || d.id === open || open === "first" && !d.closest("[hidden]")
            && !document.querySelector("details.worst-pair[open]")) { d.open = true; }
      });
    }
  }

  function toHash() {
    var filters = filtersOfForm(), params = new URLSearchParams();
    Object.keys(filters).forEach(function (k) { if (filters[k]) { params.set(k, filters[k]); } });
    history.replaceState(null, "", "#" + params.toString());
    apply(filters);
  }

  document.querySelectorAll("table.sortable th").forEach(function (th) {
    th.addEventListener("click", function () { sortBy(th); });
  });
  form.addEventListener("change", toHash);
  form.addEventListener("input", toHash);
  window.addEventListener("hashchange", fromHash);
  fromHash();
})();
