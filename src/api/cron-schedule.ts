// A CronPlaybook's schedule read with croner (docs/cron.md says why that library): five fields or a
// nickname, in an IANA time zone, and the scheduled times between two instants. Croner follows
// Vixie cron at DST changes: a fixed time in a gap runs at the first valid time after it, a fixed
// time that occurs twice runs once (the first); an interval schedule skips the gap's times and runs
// both occurrences of a repeated one.
import { Cron } from "croner";

/** The nicknames a schedule may be, as the CronJob controller and Argo take them. */
export const SCHEDULE_NICKNAMES = [
  "@yearly",
  "@annually",
  "@monthly",
  "@weekly",
  "@daily",
  "@midnight",
  "@hourly",
];

export interface Schedule {
  /** The first scheduled time strictly after `after`, or null when there is none. */
  next(after: Date): Date | null;
  /** The last scheduled time strictly before `before`, or null when there is none. */
  previous(before: Date): Date | null;
}

export type ScheduleRead =
  | { ok: true; schedule: Schedule }
  | { ok: false; field: "schedule" | "timeZone"; message: string };

/** Undefined for an IANA time zone this Node knows, else why not (naming the value). */
export function timeZoneProblem(timeZone: string): string | undefined {
  try {
    new Intl.DateTimeFormat("en-US", { timeZone });
  } catch {
    return `${JSON.stringify(timeZone)} is not an IANA time zone this controller knows (such as UTC or Europe/Berlin)`;
  }
  if (timeZone.trim() !== timeZone || timeZone === "") {
    return `${JSON.stringify(timeZone)} is not an IANA time zone (such as UTC or Europe/Berlin)`;
  }
  return undefined;
}

/** Undefined for a schedule croner reads as five fields or a nickname, else why not (naming the value). */
function scheduleProblem(text: string): string | undefined {
  const quoted = JSON.stringify(text);
  if (text.startsWith("@")) {
    return SCHEDULE_NICKNAMES.includes(text)
      ? undefined
      : `${quoted} is not a schedule: the nicknames are ${SCHEDULE_NICKNAMES.join(", ")}`;
  }
  const fields = text.trim().split(/\s+/);
  if (fields.length !== 5) {
    return `${quoted} is not a schedule: it has ${fields.length} fields, a schedule has five (minute hour day-of-month month day-of-week) or is a nickname such as @daily`;
  }
  return undefined;
}

/** The schedule read in its time zone, or the field it fails on and why. */
export function readSchedule(text: string, timeZone: string): ScheduleRead {
  const badZone = timeZoneProblem(timeZone);
  if (badZone) return { ok: false, field: "timeZone", message: badZone };
  const badShape = scheduleProblem(text);
  if (badShape) return { ok: false, field: "schedule", message: badShape };
  let cron: Cron;
  try {
    cron = new Cron(text, { timezone: timeZone, mode: "5-part", paused: true });
  } catch (error) {
    const reason = (error as Error).message.replace(/^CronPattern: /, "");
    return { ok: false, field: "schedule", message: `${JSON.stringify(text)} is not a schedule: ${reason}` };
  }
  // A pattern such as "0 0 30 2 *" (February 30th) never comes.
  if (cron.nextRun(new Date(0)) === null && cron.nextRun(new Date()) === null) {
    return { ok: false, field: "schedule", message: `${JSON.stringify(text)} never matches a time` };
  }
  return {
    ok: true,
    schedule: {
      next: (after) => cron.nextRun(after),
      previous: (before) => cron.previousRuns(1, before)[0] ?? null,
    },
  };
}

export interface DueTimes {
  /** The latest scheduled time in (after, until], if any. */
  latest: Date | undefined;
  /** How many scheduled times fall in (after, until], counted up to `limit`. */
  count: number;
  /** True when counting stopped at `limit`: there were at least that many. */
  capped: boolean;
}

/**
 * The scheduled times in (after, until]: how many, and the latest. Counting stops at `limit`
 * (a minutely schedule after a month's downtime is 43,200 times, and croner takes some 0.15 ms a step); the latest is found from the
 * end, so a long downtime costs no more than `limit` steps.
 */
export function dueTimes(schedule: Schedule, after: Date, until: Date, limit = 1_000): DueTimes {
  if (until.getTime() <= after.getTime()) return { latest: undefined, count: 0, capped: false };
  // Croner looks back from whole seconds: a second past `until` includes a time at `until` itself.
  const previous = schedule.previous(new Date(until.getTime() + 1000));
  const latest =
    previous && previous.getTime() > after.getTime() && previous.getTime() <= until.getTime()
      ? previous
      : undefined;
  if (!latest) return { latest, count: 0, capped: false };
  let count = 0;
  let cursor = after;
  while (count < limit) {
    const next = schedule.next(cursor);
    if (!next || next.getTime() > latest.getTime()) break;
    count++;
    cursor = next;
  }
  return { latest, count, capped: count >= limit && cursor.getTime() < latest.getTime() };
}
