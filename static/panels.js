// The side panels as tabs: beside the conversation on a wide screen (one panel at a time), and on
// a phone a tab bar under it whose panels open as sheets over the conversation, so neither the
// conversation nor a panel is squeezed to nothing.

const NARROW = "(max-width: 800px)";

export class Panels {
  /**
   * @param {object} o
   * @param {(panelId: string) => void} [o.onOpen]
   */
  constructor({ onOpen } = {}) {
    this.tabs = [...document.querySelectorAll('.tabs [role="tab"]')];
    this.onOpen = onOpen || (() => {});
    this.narrow = window.matchMedia(NARROW);
    for (const tab of this.tabs) {
      tab.addEventListener("click", () => {
        const id = tab.getAttribute("aria-controls");
        // On a phone the open tab's button closes its sheet again.
        if (this.narrow.matches && this.current === id) this.closeSheet();
        else this.open(id);
      });
    }
    for (const close of document.querySelectorAll(".sheet-close")) close.addEventListener("click", () => this.closeSheet());
    document.addEventListener("keydown", (e) => e.key === "Escape" && this.narrow.matches && this.closeSheet());
    const fit = () => (this.narrow.matches ? this.closeSheet() : this.open(this.current || "log-panel"));
    this.narrow.addEventListener("change", fit);
    this.current = null;
    fit();
  }

  /** Shows one panel (on a phone: as a sheet). */
  open(id) {
    this.current = id;
    for (const tab of this.tabs) {
      const mine = tab.getAttribute("aria-controls") === id;
      tab.setAttribute("aria-selected", String(mine));
      document.getElementById(tab.getAttribute("aria-controls")).hidden = !mine;
    }
    document.body.classList.toggle("sheet-open", this.narrow.matches);
    this.onOpen(id);
  }

  /** On a phone: closes the sheet; on a wide screen a panel stays open. */
  closeSheet() {
    if (!this.narrow.matches) return;
    this.current = null;
    for (const tab of this.tabs) {
      tab.setAttribute("aria-selected", "false");
      document.getElementById(tab.getAttribute("aria-controls")).hidden = true;
    }
    document.body.classList.remove("sheet-open");
  }
}
