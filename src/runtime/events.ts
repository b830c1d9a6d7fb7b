// Kubernetes Events on the Playbook, so `kubectl describe playbook` tells the run's story.
// Best effort: a failed event is logged, never retried, and never fails a reconcile.
// Bounded and aggregated as client-go's EventCorrelator and broadcaster are: an event repeated
// by later passes (same object, type, reason and message) updates the count and lastTimestamp
// of the one Event object instead of making another, repeats still queued are merged into the
// queued one, and at most maxQueued distinct events wait for a slow API server; the rest are
// dropped, counted and logged.
import { randomBytes } from "node:crypto";
import type { CoreV1Event } from "@kubernetes/client-node";
import type { Logger } from "pino";
import { API_VERSION, KIND } from "../api/playbook.js";
import { escapeControls } from "../api/visible-text.js";
import type { ApiClient, CallOptions } from "./api-client.js";
import { apiErrorMessage, isNotFound } from "./api-errors.js";

export const COMPONENT = "playbook-controller";
const MAX_MESSAGE = 1024;
/** client-go's broadcaster queues 1000 events; so does this recorder, by default. */
export const MAX_QUEUED_EVENTS = 1000;
/** client-go's EventCorrelator remembers 4096 events it wrote; so does this recorder. */
export const MAX_REMEMBERED_EVENTS = 4096;
/** Drops are logged at most this often (each line says how many since the last). */
const DROP_LOG_INTERVAL_MS = 10_000;

/** An event to record on a Playbook, as reconcile decides it. */
export interface RecordedEvent {
  type: "Normal" | "Warning";
  reason: string;
  message: string;
  /** Set for an event said once per key by its poster (e.g. a foreign pod's UID), not on every pass. */
  once?: string;
}

export interface EventTarget {
  /** The involved object's kind; default Playbook. */
  kind?: string;
  name: string;
  namespace: string;
  uid?: string | undefined;
  resourceVersion?: string | undefined;
}

/** The calls events need, so a test can record them without an API server. */
export interface EventApi {
  createNamespacedEvent(
    args: { namespace: string; body: CoreV1Event },
    options?: CallOptions,
  ): Promise<unknown>;
  /** A merge patch of an Event: its count and lastTimestamp. */
  patchNamespacedEvent(
    args: { namespace: string; name: string; body: Partial<CoreV1Event> },
    options?: CallOptions,
  ): Promise<unknown>;
}

/** The event calls on the controller's API client. */
export function eventApiOf(api: Pick<ApiClient, "createNamespacedEvent" | "call">): EventApi {
  return {
    createNamespacedEvent: (args, options) => api.createNamespacedEvent(args, options),
    patchNamespacedEvent: (args, options) =>
      api.call({
        method: "PATCH",
        path: `/api/v1/namespaces/${encodeURIComponent(args.namespace)}/events/${encodeURIComponent(args.name)}`,
        body: args.body,
        contentType: "application/merge-patch+json",
        options,
      }),
  };
}

export interface EventRecorderOptions {
  /** Ends the writes in flight and skips the rest (this replica stopped leading). */
  signal?: AbortSignal;
  /** Distinct events waiting to be written at most; more are dropped. */
  maxQueued?: number;
  /** Events written that a repeat updates, at most (least recently used forgotten first). */
  maxRemembered?: number;
  /** Called for each event dropped because the queue was full. */
  onDropped?: () => void;
}

/** One distinct event waiting to be written, with the repeats merged into it. */
interface Queued {
  key: string;
  target: EventTarget;
  event: RecordedEvent;
  count: number;
  first: Date;
  last: Date;
}

/** An Event object this recorder wrote, which repeats update. */
interface Written {
  name: string;
  namespace: string;
  count: number;
}

export class EventRecorder {
  private readonly core: EventApi;
  private readonly identity: string;
  private readonly log: Logger;
  private readonly signal: AbortSignal | undefined;
  private readonly maxQueued: number;
  private readonly maxRemembered: number;
  private readonly onDropped: (() => void) | undefined;
  /** Distinct events in the order they were first posted, and the same by key. */
  private readonly queue: Queued[] = [];
  private readonly queued = new Map<string, Queued>();
  /** Written events by key, least recently used first. */
  private readonly written = new Map<string, Written>();
  private draining: Promise<void> | undefined;
  private droppedTotal = 0;
  private droppedUnlogged = 0;
  private lastDropLog = Number.NEGATIVE_INFINITY;

  constructor(core: EventApi, identity: string, log: Logger, options: EventRecorderOptions = {}) {
    this.core = core;
    this.identity = identity;
    this.log = log;
    this.signal = options.signal;
    this.maxQueued = options.maxQueued ?? MAX_QUEUED_EVENTS;
    this.maxRemembered = options.maxRemembered ?? MAX_REMEMBERED_EVENTS;
    this.onDropped = options.onDropped;
  }

  /** Events dropped because the queue was full, since this recorder started. */
  get dropped(): number {
    return this.droppedTotal;
  }

  /** Distinct events waiting to be written. */
  get queuedCount(): number {
    return this.queue.length;
  }

  /**
   * Queues the event; events are written one after the other (so `kubectl describe` lists them
   * in order) without holding up the worker that recorded them.
   */
  post(target: EventTarget, event: RecordedEvent, now: Date): void {
    if (this.signal?.aborted) return;
    const key = eventKey(target, event);
    const waiting = this.queued.get(key);
    if (waiting) {
      waiting.count++;
      waiting.last = now;
      return;
    }
    if (this.queue.length >= this.maxQueued) {
      this.drop(target, event);
      return;
    }
    const entry: Queued = { key, target, event, count: 1, first: now, last: now };
    this.queue.push(entry);
    this.queued.set(key, entry);
    this.kick();
  }

  private kick(): void {
    if (this.draining) return;
    this.draining = this.drain().finally(() => {
      this.draining = undefined;
      // Posted between the drain's last look at the queue and now.
      if (this.queue.length > 0) this.kick();
    });
  }

  /** Resolves when every posted event was written (or failed). */
  async flush(): Promise<void> {
    while (this.draining) await this.draining;
  }

  private async drain(): Promise<void> {
    for (let next = this.queue.shift(); next; next = this.queue.shift()) {
      this.queued.delete(next.key);
      if (this.signal?.aborted) continue;
      await this.write(next);
    }
  }

  private drop(target: EventTarget, event: RecordedEvent): void {
    this.droppedTotal++;
    this.droppedUnlogged++;
    this.onDropped?.();
    const now = performance.now();
    if (now - this.lastDropLog < DROP_LOG_INTERVAL_MS) return;
    this.lastDropLog = now;
    this.log.warn(
      {
        namespace: target.namespace,
        name: target.name,
        reason: event.reason,
        dropped: this.droppedUnlogged,
        droppedTotal: this.droppedTotal,
        queued: this.queue.length,
      },
      "Dropped events: the API server is not taking them as fast as they come",
    );
    this.droppedUnlogged = 0;
  }

  private async write(entry: Queued): Promise<void> {
    const { target, event } = entry;
    const options = this.signal ? { signal: this.signal } : undefined;
    try {
      const seen = this.written.get(entry.key);
      if (seen) {
        const count = seen.count + entry.count;
        try {
          await this.core.patchNamespacedEvent(
            { namespace: seen.namespace, name: seen.name, body: { count, lastTimestamp: entry.last } },
            options,
          );
          this.remember(entry.key, { ...seen, count });
          return;
        } catch (error) {
          // The Event expired (the API server keeps them an hour): the repeat starts a new one.
          if (!isNotFound(error)) throw error;
          this.written.delete(entry.key);
        }
      }
      const body = this.eventBody(entry);
      await this.core.createNamespacedEvent({ namespace: target.namespace, body }, options);
      this.remember(entry.key, { name: body.metadata.name, namespace: target.namespace, count: entry.count });
    } catch (error) {
      this.log.warn(
        { namespace: target.namespace, name: target.name, reason: event.reason, err: apiErrorMessage(error) },
        "Failed to record event",
      );
    }
  }

  private remember(key: string, written: Written): void {
    // Deleted first, so that the Map's order stays least recently written first.
    this.written.delete(key);
    this.written.set(key, written);
    while (this.written.size > this.maxRemembered) {
      const oldest = this.written.keys().next().value;
      if (oldest === undefined) break;
      this.written.delete(oldest);
    }
  }

  private eventBody(entry: Queued): CoreV1Event & { metadata: { name: string } } {
    const { target, event } = entry;
    return {
      apiVersion: "v1",
      kind: "Event",
      metadata: {
        name: `${target.name}.${entry.first.getTime().toString(16)}${randomBytes(3).toString("hex")}`,
        namespace: target.namespace,
      },
      involvedObject: {
        apiVersion: API_VERSION,
        kind: target.kind ?? KIND,
        name: target.name,
        namespace: target.namespace,
        uid: target.uid,
        resourceVersion: target.resourceVersion,
      },
      type: event.type,
      reason: event.reason,
      message: truncated(event.message),
      source: { component: COMPONENT },
      reportingComponent: COMPONENT,
      reportingInstance: this.identity,
      firstTimestamp: entry.first,
      lastTimestamp: entry.last,
      count: entry.count,
    };
  }
}

/** The message as the event shows it: control characters as escapes (a kubelet's or a task's text), then cut. */
function truncated(raw: string): string {
  const message = escapeControls(raw);
  return message.length > MAX_MESSAGE ? `${message.slice(0, MAX_MESSAGE - 1)}…` : message;
}

/** Events are the same when they are about the same object and say the same thing. */
function eventKey(target: EventTarget, event: RecordedEvent): string {
  const object = target.uid ?? `${target.namespace}/${target.name}`;
  return JSON.stringify([
    target.namespace,
    target.name,
    object,
    event.type,
    event.reason,
    truncated(event.message),
  ]);
}
