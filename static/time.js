// Times on the page, in one format: the user's locale (12- or 24-hour as they are used to).

const CLOCK = new Intl.DateTimeFormat(undefined, { hour: "2-digit", minute: "2-digit", second: "2-digit" });
const CLOCK_MS = new Intl.DateTimeFormat(undefined, {
  hour: "2-digit",
  minute: "2-digit",
  second: "2-digit",
  fractionalSecondDigits: 3,
});
const DAY = new Intl.DateTimeFormat(undefined, { dateStyle: "medium" });

/** The time of day of `date`, with milliseconds when `ms` (the event console). */
export function clockTime(date, { ms = false } = {}) {
  return (ms ? CLOCK_MS : CLOCK).format(date);
}

/** The day of `date`. */
export function dayOf(date) {
  return DAY.format(date);
}

/** The time of `date`, with its day unless it is today. */
export function whenTime(date) {
  const today = new Date().toDateString() === date.toDateString();
  return today ? clockTime(date) : `${dayOf(date)} ${clockTime(date)}`;
}
