// tabs.js: the tool tabs as the WAI-ARIA tabs pattern (https://www.w3.org/WAI/ARIA/apg/patterns/tabs/), for
// every `[role=tab]` button in the tab list, however many tools the page has: one tab in the Tab order (the
// selected one), Left/Right arrows move between tabs and wrap, Home/End go to the first/last, and a tab
// opens its panel (`aria-controls`) as it gets focus. The address names the open tool (#whisper, #search ...):
// a link with a hash opens that tool, and switching tabs rewrites the hash. Tools add their tab to index.html
// (a button id="tab-<name>" and a section id="panel-<name>"); nothing here knows them by name.

/** Wire the tab list `nav`; -> {select(name), selected()}. `fallback`: the tab opened when the hash names none. */
export function mountTabs(nav, fallback) {
  const all = () => Array.from(nav.querySelectorAll('[role="tab"]'));
  const nameOf = (tab) => tab.id.replace(/^tab-/, "");

  function select(tab, focus = false) {
    for (const t of all()) {
      const on = t === tab;
      t.setAttribute("aria-selected", String(on));
      t.tabIndex = on ? 0 : -1;
      const panel = document.getElementById(t.getAttribute("aria-controls"));
      if (panel) panel.hidden = !on;
    }
    if (focus) tab.focus();
    if (location.hash !== `#${nameOf(tab)}`) history.replaceState(null, "", `#${nameOf(tab)}`);
    nav.dispatchEvent(new CustomEvent("tabchange", { detail: { name: nameOf(tab) } }));
  }

  nav.addEventListener("click", (e) => {
    const tab = e.target.closest('[role="tab"]');
    if (tab && nav.contains(tab)) select(tab);
  });
  nav.addEventListener("keydown", (e) => {
    const tabs = all(), i = tabs.indexOf(e.target.closest('[role="tab"]'));
    if (i < 0) return;
    const j = { ArrowRight: i + 1, ArrowLeft: i - 1, Home: 0, End: tabs.length - 1 }[e.key];
    if (j === undefined) return;
    e.preventDefault();
    select(tabs[(j + tabs.length) % tabs.length], true);
  });

  const byName = (name) => all().find((t) => nameOf(t) === name);
  const fromHash = () => byName(decodeURIComponent(location.hash.slice(1)));
  window.addEventListener("hashchange", () => { const t = fromHash(); if (t) select(t); });
  select(fromHash() || byName(fallback) || all()[0]);
  return {
    select: (name) => { const t = byName(name); if (t) select(t); },
    selected: () => nameOf(all().find((t) => t.getAttribute("aria-selected") === "true")),
  };
}
