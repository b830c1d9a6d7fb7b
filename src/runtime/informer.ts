// A list-watch cache that owns its recovery, since client-node's watch can end or fall silent:
// it restarts the watch with backoff and jitter from the last resourceVersion, relists on
// 410 Gone, restarts a watch that delivered nothing (not even a bookmark) for too long, and
// hands every cached object to its handlers again on a periodic resync. What it holds is an
// IndexedStore (indexed-store.ts).
import type { Logger } from "pino";
import { z } from "zod";
import { formatDuration } from "../api/duration.js";
import type { ApiClient, ListPage } from "./api-client.js";
import { apiErrorMessage, describeApiFailure, isGone } from "./api-errors.js";
import { IndexedStore } from "./indexed-store.js";

export interface InformerHandlers<T> {
  /** old is undefined for an object seen for the first time. */
  onUpsert?: (object: T, old: T | undefined) => void;
  onDelete?: (object: T) => void;
}

export interface InformerOptions<T> {
  /** For logs and metrics, e.g. "pods". */
  resource: string;
  /** The client of every other call: the watch shares its connections, credentials and proxy. */
  api: ApiClient;
  watchPath: string;
  labelSelector?: string;
  /**
   * One page of the collection, from the continue token of the page before (undefined: the
   * first). Each page is cached before the next is asked for, so a large collection never sits
   * in memory twice, as one text and one parsed tree.
   */
  list: (continueToken: string | undefined) => Promise<ListPage>;
  parse: (raw: unknown) => T | null;
  /**
   * Applied to every listed or watched object before parse, as client-go's SetTransform: drops
   * what the controller never reads, so the cache does not hold it.
   */
  transform?: (raw: unknown) => unknown;
  keyOf: (object: T) => string;
  resourceVersionOf: (object: T) => string | undefined;
  /** A secondary index, e.g. pods by the Playbook that owns them. */
  indexOf?: (object: T) => string | null;
  watchTimeoutMs: number;
  resyncMs: number;
  log: Logger;
  /** A watch restarted from the last resourceVersion: "timeout" (the server ended it, as asked), "error" or "silent". */
  onReconnect?: (cause: "timeout" | "error" | "silent") => void;
  onRelist?: () => void;
  /** The informer's problem (see `problem`) changed. */
  onProblemChange?: () => void;
  random?: () => number;
}

/** Server-side watch timeout of the informers: between this and twice this; the watchdog must be longer. */
export const WATCH_SECONDS_MIN = 120;

const WatchEventSchema = z.looseObject({ type: z.string(), object: z.unknown() });
const WatchStatusSchema = z.looseObject({ code: z.number().optional(), message: z.string().optional() });
const WatchMetaSchema = z.looseObject({
  metadata: z.looseObject({ resourceVersion: z.string().optional() }).optional(),
});

type WatchEnd = { kind: "gone" } | { kind: "ended" } | { kind: "silent" } | { kind: "error"; error: unknown };

const MIN_BACKOFF_MS = 200;

const GONE_PROBLEM = "watch expired (410 Gone), relisting";

const MAX_BACKOFF_MS = 30_000;

/** Times a list starts again from its first page after its continue token expired. */
const MAX_LIST_RESTARTS = 3;

export class Informer<T> {
  private readonly cache: IndexedStore<T>;
  private readonly handlers: InformerHandlers<T>[] = [];
  private resourceVersion = "";
  private synced = false;
  private currentProblem: string | undefined = "has not listed yet";
  private stopped = false;
  private abort: AbortController | undefined;
  private resyncTimer: NodeJS.Timeout | undefined;
  private wake: (() => void) | undefined;
  private loop: Promise<void> | undefined;
  private syncWaiters: (() => void)[] = [];
  private readonly random: () => number;
  private readonly options: InformerOptions<T>;

  constructor(options: InformerOptions<T>) {
    this.options = options;
    this.cache = new IndexedStore(options.indexOf);
    this.random = options.random ?? Math.random;
  }

  addHandlers(handlers: InformerHandlers<T>): void {
    this.handlers.push(handlers);
  }

  /**
   * Why this cache cannot be trusted to be current, in words for /readyz and the log, or
   * undefined while it is synced and its watch is open (or was renewed as asked).
   */
  get problem(): string | undefined {
    return this.currentProblem;
  }

  private setProblem(problem: string | undefined): void {
    if (problem === this.currentProblem) return;
    this.currentProblem = problem;
    this.options.onProblemChange?.();
  }

  get(key: string): T | undefined {
    return this.cache.get(key);
  }

  list(): T[] {
    return this.cache.list();
  }

  byIndex(value: string): T[] {
    return this.cache.byIndex(value);
  }

  start(): void {
    if (this.loop) return;
    this.loop = this.run();
    if (this.options.resyncMs > 0) {
      this.resyncTimer = setInterval(() => this.resync(), this.options.resyncMs);
      this.resyncTimer.unref();
    }
  }

  waitForSync(): Promise<void> {
    if (this.synced) return Promise.resolve();
    return new Promise((resolve) => this.syncWaiters.push(resolve));
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.resyncTimer) clearInterval(this.resyncTimer);
    this.abort?.abort();
    this.wake?.();
    // A list call in flight cannot be aborted; do not let it hold a shutdown for long.
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([this.loop, new Promise((resolve) => (timer = setTimeout(resolve, 2000)))]);
    clearTimeout(timer);
  }

  /** Hands every cached object to the handlers again, as client-go's resync does. */
  resync(): void {
    for (const object of this.cache.values()) this.emitUpsert(object, object);
  }

  private async run(): Promise<void> {
    const { log, resource } = this.options;
    let needList = true;
    let afterGone = false;
    let failures = 0;
    while (!this.stopped) {
      try {
        if (needList) {
          await this.relist();
          needList = false;
          afterGone = false;
        }
        const end = await this.watchOnce();
        if (this.stopped) break;
        switch (end.kind) {
          case "gone":
            log.info({ resource, resourceVersion: this.resourceVersion }, "Watch expired, relisting");
            this.setProblem(GONE_PROBLEM);
            needList = true;
            afterGone = true;
            failures = 0;
            continue;
          case "silent":
            log.warn({ resource, resourceVersion: this.resourceVersion }, "Watch went silent, restarting it");
            this.setProblem(
              `watch delivered nothing for ${formatDuration(this.options.watchTimeoutMs)} (API server frozen or the connection dead), restarting it`,
            );
            this.options.onReconnect?.("silent");
            break;
          case "ended":
            failures = 0;
            this.options.onReconnect?.("timeout");
            break;
          case "error":
            if (isGone(end.error)) {
              this.setProblem(GONE_PROBLEM);
              needList = true;
              afterGone = true;
              continue;
            }
            failures++;
            log.warn({ resource, err: apiErrorMessage(end.error) }, "Watch failed");
            this.setProblem(`watch failed: ${describeApiFailure(end.error)}`);
            this.options.onReconnect?.("error");
            break;
        }
      } catch (error) {
        failures++;
        log.warn({ resource, err: apiErrorMessage(error) }, "List failed");
        const what = !this.synced ? "list" : afterGone ? "relist after 410 Gone" : "relist";
        this.setProblem(`${what} failed: ${describeApiFailure(error)}`);
      }
      if (failures > 0) await this.sleep(this.backoff(failures));
    }
  }

  private backoff(failures: number): number {
    const ceiling = Math.min(MAX_BACKOFF_MS, MIN_BACKOFF_MS * 2 ** (failures - 1));
    return ceiling / 2 + (ceiling / 2) * this.random();
  }

  private sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.wake = undefined;
        resolve();
      }, ms);
      this.wake = () => {
        clearTimeout(timer);
        this.wake = undefined;
        resolve();
      };
    });
  }

  private async relist(): Promise<void> {
    const seen = new Set<string>();
    let resourceVersion = "";
    let cont: string | undefined;
    let restarts = 0;
    for (;;) {
      let page: ListPage;
      try {
        page = await this.options.list(cont);
      } catch (error) {
        // A continue token outlived by a compaction: start the list again, as client-go's pager
        // does, a few times before the outer loop's backoff takes over.
        if (cont === undefined || !isGone(error) || restarts >= MAX_LIST_RESTARTS) throw error;
        restarts++;
        this.options.log.info(
          { resource: this.options.resource },
          "List continue token expired, listing again",
        );
        seen.clear();
        cont = undefined;
        continue;
      }
      if (cont === undefined) resourceVersion = page.resourceVersion;
      for (const raw of page.items) {
        const object = this.parseObject(raw);
        if (!object) continue;
        const key = this.options.keyOf(object);
        seen.add(key);
        const old = this.cache.get(key);
        if (old && this.options.resourceVersionOf(old) === this.options.resourceVersionOf(object)) continue;
        this.cache.set(key, object);
        this.emitUpsert(object, old);
      }
      cont = page.continue || undefined;
      if (cont === undefined) break;
    }
    this.options.onRelist?.();
    for (const [key, old] of this.cache.entries()) {
      if (seen.has(key)) continue;
      this.cache.delete(key);
      for (const handler of this.handlers) handler.onDelete?.(old);
    }
    this.resourceVersion = resourceVersion;
    this.setProblem(undefined);
    if (!this.synced) {
      this.synced = true;
      for (const waiter of this.syncWaiters.splice(0)) waiter();
    }
  }

  private watchOnce(): Promise<WatchEnd> {
    const { api, watchPath, labelSelector, watchTimeoutMs } = this.options;
    return new Promise<WatchEnd>((resolve) => {
      let settled = false;
      let lastEvent = Date.now();
      const finish = (end: WatchEnd) => {
        if (settled) return;
        settled = true;
        clearInterval(watchdog);
        controller.abort();
        resolve(end);
      };
      const controller = new AbortController();
      this.abort = controller;
      controller.signal.addEventListener("abort", () => finish({ kind: "ended" }), { once: true });
      const watchdog = setInterval(
        () => {
          if (Date.now() - lastEvent > watchTimeoutMs) finish({ kind: "silent" });
        },
        Math.min(10_000, Math.max(100, watchTimeoutMs / 4)),
      );
      watchdog.unref();
      const query = {
        resourceVersion: this.resourceVersion,
        allowWatchBookmarks: true,
        // The API server ends a healthy watch after this (well before the watchdog fires), so a
        // quiet watch is renewed rather than mistaken for a silent one; jitter spreads the load.
        timeoutSeconds: Math.floor(WATCH_SECONDS_MIN + WATCH_SECONDS_MIN * this.random()),
        labelSelector: labelSelector || undefined,
      };
      // A watch the server answered is a current cache again (after a failure or a silence).
      const opened = () => {
        if (this.synced && this.currentProblem !== GONE_PROBLEM) this.setProblem(undefined);
      };
      const onLine = (line: string) => {
        lastEvent = Date.now();
        if (settled) return;
        const event = WatchEventSchema.safeParse(parseJson(line));
        if (event.success) this.handleEvent(event.data.type, event.data.object, finish);
      };
      api.watch(watchPath, query, { onOpen: opened, onLine }, { signal: controller.signal }).then(
        () => finish({ kind: "ended" }),
        (error: unknown) => finish({ kind: "error", error }),
      );
    });
  }

  private handleEvent(type: string, raw: unknown, finish: (end: WatchEnd) => void): void {
    if (type === "ERROR") {
      const status = WatchStatusSchema.safeParse(raw);
      if (status.success && status.data.code === 410) finish({ kind: "gone" });
      else finish({ kind: "error", error: new Error(`watch error: ${JSON.stringify(raw)}`) });
      return;
    }
    const meta = WatchMetaSchema.safeParse(raw);
    const resourceVersion = meta.success ? meta.data.metadata?.resourceVersion : undefined;
    if (type === "BOOKMARK") {
      if (resourceVersion) this.resourceVersion = resourceVersion;
      return;
    }
    const object = this.parseObject(raw);
    if (!object) {
      this.options.log.warn(
        { resource: this.options.resource, type },
        "Ignored an object that did not parse",
      );
      if (resourceVersion) this.resourceVersion = resourceVersion;
      return;
    }
    const key = this.options.keyOf(object);
    if (type === "DELETED") {
      const old = this.cache.get(key);
      this.cache.delete(key);
      for (const handler of this.handlers) handler.onDelete?.(old ?? object);
    } else if (type === "ADDED" || type === "MODIFIED") {
      const old = this.cache.get(key);
      this.cache.set(key, object);
      this.emitUpsert(object, old);
    }
    if (resourceVersion) this.resourceVersion = resourceVersion;
  }

  private parseObject(raw: unknown): T | null {
    const { transform, parse } = this.options;
    return parse(transform ? transform(raw) : raw);
  }

  private emitUpsert(object: T, old: T | undefined): void {
    for (const handler of this.handlers) handler.onUpsert?.(object, old);
  }
}

function parseJson(line: string): unknown {
  try {
    return JSON.parse(line);
  } catch {
    return undefined;
  }
}
