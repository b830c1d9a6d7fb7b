// The wait before a task's retry: retryDelay × retryBackoff^(n-1) for the n-th retry, at most
// retryMaxDelay, then jittered down to somewhere in [half, all] of that, so that many runs retrying
// against one flaky service do not all come back at once, while every wait stays at least half of
// what the spec says. Pure: the random source is injected (tests pass a fixed one).

import { formatDuration } from "../api/duration.js";
import {
  DEFAULT_RETRY_BACKOFF,
  DEFAULT_RETRY_DELAY_MS,
  DEFAULT_RETRY_MAX_DELAY_MS,
  type RetryWaits,
} from "../api/limits.js";

/** The controller's defaults: what a task whose limits carry no waits (read back from lines) takes. */
export const DEFAULT_RETRY_WAITS: RetryWaits = {
  delay: { ms: DEFAULT_RETRY_DELAY_MS, source: "default", field: "the default retry delay" },
  backoff: { value: DEFAULT_RETRY_BACKOFF, source: "default", field: "the default retry backoff" },
  maxDelay: { ms: DEFAULT_RETRY_MAX_DELAY_MS, source: "default", field: "the default retry max delay" },
};

/** The n-th retry's wait before jitter (n from 1): delay × backoff^(n-1), at most maxDelay. */
export function retryCapMs(waits: RetryWaits, retry: number): number {
  const grown = waits.delay.ms * waits.backoff.value ** Math.max(0, retry - 1);
  return Math.min(grown, waits.maxDelay.ms);
}

/** The n-th retry's wait: its cap jittered into [cap/2, cap], in whole milliseconds. */
export function retryWaitMs(waits: RetryWaits, retry: number, random: () => number = Math.random): number {
  const cap = retryCapMs(waits, retry);
  const share = Math.min(1, Math.max(0, random()));
  return Math.round(cap / 2 + (cap / 2) * share);
}

/** A wait as a person reads it: "750ms", "4.2s", "1m". */
export function showWait(ms: number): string {
  return formatDuration(ms < 1000 ? ms : Math.round(ms / 100) * 100);
}
