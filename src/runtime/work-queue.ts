// A coalescing work queue of `namespace/name` keys, as client-go's workqueue: a key is pending at
// most once, is never handed to two workers at the same time, and retries back off per key.

export interface WorkQueueOptions {
  /** First retry delay; doubles per consecutive failure of the same key. */
  baseDelayMs?: number;
  maxDelayMs?: number;
  /** Overall retry rate (token bucket), so a storm of failures cannot hammer the API server. */
  retriesPerSecond?: number;
  retryBurst?: number;
  onDepthChange?: (depth: number) => void;
  random?: () => number;
}

export class WorkQueue {
  private readonly queue: string[] = [];
  private readonly dirty = new Set<string>();
  private readonly processing = new Set<string>();
  private readonly failures = new Map<string, number>();
  private readonly delayed = new Map<string, { at: number; timer: NodeJS.Timeout }>();
  private readonly waiters: ((key: string | undefined) => void)[] = [];
  private readonly idleWaiters: (() => void)[] = [];
  private shuttingDown = false;
  private tokens: number;
  private tokensAt = Date.now();
  private readonly baseDelayMs: number;
  private readonly maxDelayMs: number;
  private readonly retriesPerSecond: number;
  private readonly retryBurst: number;
  private readonly onDepthChange: (depth: number) => void;
  private readonly random: () => number;

  constructor(options: WorkQueueOptions = {}) {
    this.baseDelayMs = options.baseDelayMs ?? 50;
    this.maxDelayMs = options.maxDelayMs ?? 300_000;
    this.retriesPerSecond = options.retriesPerSecond ?? 10;
    this.retryBurst = options.retryBurst ?? 100;
    this.tokens = this.retryBurst;
    this.onDepthChange = options.onDepthChange ?? (() => {});
    this.random = options.random ?? Math.random;
  }

  get length(): number {
    return this.queue.length;
  }

  /** Queues the key unless it is already pending; a key being processed is queued again after done(). */
  add(key: string): void {
    if (this.shuttingDown || this.dirty.has(key)) return;
    this.dirty.add(key);
    if (this.processing.has(key)) return;
    const waiter = this.waiters.shift();
    if (waiter) {
      this.processing.add(key);
      this.dirty.delete(key);
      waiter(key);
      return;
    }
    this.queue.push(key);
    this.onDepthChange(this.queue.length);
  }

  /** Queues the key after a delay; an earlier pending delay for the same key wins. */
  addAfter(key: string, delayMs: number): void {
    if (this.shuttingDown) return;
    if (delayMs <= 0) {
      this.add(key);
      return;
    }
    const at = Date.now() + delayMs;
    const existing = this.delayed.get(key);
    if (existing && existing.at <= at) return;
    if (existing) clearTimeout(existing.timer);
    const timer = setTimeout(() => {
      this.delayed.delete(key);
      this.add(key);
    }, delayMs);
    timer.unref();
    this.delayed.set(key, { at, timer });
  }

  /** Queues the key after its per-key exponential backoff (with jitter) and the overall rate limit. */
  addRateLimited(key: string): number {
    const failures = this.failures.get(key) ?? 0;
    this.failures.set(key, failures + 1);
    const exponential = Math.min(this.maxDelayMs, this.baseDelayMs * 2 ** failures);
    const jittered = exponential * (0.8 + 0.4 * this.random());
    const delay = Math.max(jittered, this.bucketDelay());
    this.addAfter(key, delay);
    return delay;
  }

  private bucketDelay(): number {
    const now = Date.now();
    this.tokens = Math.min(
      this.retryBurst,
      this.tokens + ((now - this.tokensAt) / 1000) * this.retriesPerSecond,
    );
    this.tokensAt = now;
    this.tokens -= 1;
    return this.tokens >= 0 ? 0 : (-this.tokens / this.retriesPerSecond) * 1000;
  }

  /** Clears the key's failure count after a successful pass. */
  forget(key: string): void {
    this.failures.delete(key);
  }

  /** Resolves with the next key, or undefined once the queue shuts down. */
  get(): Promise<string | undefined> {
    const key = this.queue.shift();
    if (key !== undefined) {
      this.onDepthChange(this.queue.length);
      this.dirty.delete(key);
      this.processing.add(key);
      return Promise.resolve(key);
    }
    if (this.shuttingDown) return Promise.resolve(undefined);
    return new Promise((resolve) => this.waiters.push(resolve));
  }

  done(key: string): void {
    this.processing.delete(key);
    if (this.dirty.has(key)) {
      this.dirty.delete(key);
      this.add(key);
    }
    if (this.processing.size === 0) for (const idle of this.idleWaiters.splice(0)) idle();
  }

  /** Stops handing out keys and resolves once the keys being processed are done. */
  async shutDown(): Promise<void> {
    this.shuttingDown = true;
    for (const { timer } of this.delayed.values()) clearTimeout(timer);
    this.delayed.clear();
    for (const waiter of this.waiters.splice(0)) waiter(undefined);
    this.queue.length = 0;
    this.dirty.clear();
    this.onDepthChange(0);
    if (this.processing.size === 0) return;
    await new Promise<void>((resolve) => this.idleWaiters.push(resolve));
  }
}
