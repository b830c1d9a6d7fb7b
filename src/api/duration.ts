// Go-style durations ("90s", "10m", "1h30m", "250ms"), as metav1.Duration accepts them.
// Values are kept in whole milliseconds: finer precision means nothing for shell tasks.

const UNIT_MS: Record<string, number> = {
  ns: 1e-6,
  us: 1e-3,
  µs: 1e-3,
  μs: 1e-3,
  ms: 1,
  s: 1000,
  m: 60_000,
  h: 3_600_000,
};

const PART = /^(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)/;

/** Its message names the text once, quoted: `"90x" is not a duration (use units ...)`. */
export class DurationError extends Error {}

/** Parses a Go duration string into milliseconds. Negative durations are refused. */
export function parseDuration(text: string): number {
  if (typeof text !== "string" || text.length === 0) {
    throw new DurationError('"" must be a duration such as 90s, 10m or 1h30m, not an empty string');
  }
  const quoted = JSON.stringify(text);
  if (text.startsWith("-")) throw new DurationError(`${quoted} must not be negative`);
  if (text === "0" || text === "+0") return 0;
  let rest = text.startsWith("+") ? text.slice(1) : text;
  if (rest.length === 0) throw new DurationError(`${quoted} is not a duration`);
  let total = 0;
  while (rest.length > 0) {
    const match = PART.exec(rest);
    if (!match) {
      throw new DurationError(`${quoted} is not a duration (use units h, m, s, ms, e.g. 1h30m, 90s, 250ms)`);
    }
    const [whole, amount, unit] = match as unknown as [string, string, string];
    total += Number(amount) * (UNIT_MS[unit] as number);
    rest = rest.slice(whole.length);
  }
  if (!Number.isFinite(total) || total > Number.MAX_SAFE_INTEGER) {
    throw new DurationError(`${quoted} is too large`);
  }
  // 0 means "off" for a stall limit and "at once" for killGrace: a positive duration never becomes it.
  return total > 0 ? Math.max(1, Math.round(total)) : 0;
}

/** Formats milliseconds as the shortest Go duration: 5400000 -> "1h30m", 90000 -> "1m30s". */
export function formatDuration(ms: number): string {
  if (!Number.isFinite(ms) || ms < 0) throw new DurationError(`cannot format ${ms}ms`);
  const whole = Math.round(ms);
  if (whole === 0) return "0s";
  const hours = Math.floor(whole / 3_600_000);
  const minutes = Math.floor((whole % 3_600_000) / 60_000);
  const millis = whole % 60_000;
  let out = "";
  if (hours > 0) out += `${hours}h`;
  if (minutes > 0) out += `${minutes}m`;
  if (millis > 0) {
    if (millis % 1000 === 0) out += `${millis / 1000}s`;
    else if (hours === 0 && minutes === 0 && millis < 1000) out += `${millis}ms`;
    else out += `${(millis / 1000).toString()}s`;
  }
  return out;
}
