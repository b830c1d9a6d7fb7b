// The injected clock every run decision takes `now` from, so tests can fix the time.
export interface Clock {
  now(): Date;
}

export const systemClock: Clock = { now: () => new Date() };
