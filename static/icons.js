// Icons: <svg><use> references to the symbols in index.html (system fonts may lack emoji).

/** An aria-hidden inline icon; `name` is one of index.html's `i-…` symbols. */
export function icon(name, className = "icon") {
  const holder = document.createElement("span");
  holder.innerHTML = `<svg class="${className}" viewBox="0 0 24 24" aria-hidden="true" focusable="false"><use href="#i-${name}"></use></svg>`;
  return holder.firstElementChild;
}
