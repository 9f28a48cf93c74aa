(function () {
  var items = document.querySelectorAll('[data-legend]');
  function focus(cls, on) {
    document.querySelectorAll('svg [class*="c-"], .sw').forEach(function (el) {
      var c = el.getAttribute('class') || '';
      if (c.indexOf('c-') < 0) return;
      el.classList.toggle('dim', on && c.split(' ').indexOf(cls) < 0);
    });
  }
  items.forEach(function (li) {
    li.addEventListener('mouseenter', function () { focus(li.dataset.legend, true); });
    li.addEventListener('mouseleave', function () { focus(li.dataset.legend, false); });
  });
})();
