// The console's own script: "select all" boxes. Live refresh is htmx (hx-trigger="every Ns").
document.addEventListener("change", function (event) {
  var box = event.target;
  var name = box && box.getAttribute && box.getAttribute("data-select-all");
  if (!name || !box.form) { return; }
  var boxes = box.form.querySelectorAll('input[type="checkbox"][name="' + name + '"]');
  for (var i = 0; i < boxes.length; i++) { boxes[i].checked = box.checked; }
});
