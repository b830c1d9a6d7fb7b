// Kubernetes Events on the Playbook, so `kubectl describe playbook` tells the run's story.
// Best effort: a failed event is logged, never retried, and never fails a reconcile.
import { randomBytes } from "node:crypto";
import type { CoreV1Event } from "@kubernetes/client-node";
import type { Logger } from "pino";
import { API_VERSION, KIND } from "../api/playbook.js";
import type { ApiClient } from "./api-client.js";
import { apiErrorMessage } from "./kube.js";
import type { RecordedEvent } from "./reconcile.js";

export const COMPONENT = "playbook-controller";
const MAX_MESSAGE = 1024;

export interface EventTarget {
  name: string;
  namespace: string;
  uid?: string | undefined;
  resourceVersion?: string | undefined;
}

/** The one call events need, so a test can record them without an API server. */
export type EventApi = Pick<ApiClient, "createNamespacedEvent">;

export class EventRecorder {
  private readonly core: EventApi;
  private readonly identity: string;
  private readonly log: Logger;

  private readonly signal: AbortSignal | undefined;

  /** signal, when given, ends the writes in flight and skips the rest (this replica stopped leading). */
  constructor(core: EventApi, identity: string, log: Logger, signal?: AbortSignal) {
    this.core = core;
    this.identity = identity;
    this.log = log;
    this.signal = signal;
  }

  private pending: Promise<void> = Promise.resolve();

  /**
   * Queues the event; events are written one after the other (so `kubectl describe` lists them
   * in order) without holding up the worker that recorded them.
   */
  post(target: EventTarget, event: RecordedEvent, now: Date): void {
    this.pending = this.pending.then(() => this.record(target, event, now));
  }

  /** Resolves when every posted event was written (or failed). */
  flush(): Promise<void> {
    return this.pending;
  }

  async record(target: EventTarget, event: RecordedEvent, now: Date): Promise<void> {
    if (this.signal?.aborted) return;
    const body: CoreV1Event = {
      apiVersion: "v1",
      kind: "Event",
      metadata: {
        name: `${target.name}.${now.getTime().toString(16)}${randomBytes(3).toString("hex")}`,
        namespace: target.namespace,
      },
      involvedObject: {
        apiVersion: API_VERSION,
        kind: KIND,
        name: target.name,
        namespace: target.namespace,
        uid: target.uid,
        resourceVersion: target.resourceVersion,
      },
      type: event.type,
      reason: event.reason,
      message:
        event.message.length > MAX_MESSAGE ? `${event.message.slice(0, MAX_MESSAGE - 1)}…` : event.message,
      source: { component: COMPONENT },
      reportingComponent: COMPONENT,
      reportingInstance: this.identity,
      firstTimestamp: now,
      lastTimestamp: now,
      count: 1,
    };
    try {
      await this.core.createNamespacedEvent(
        { namespace: target.namespace, body },
        this.signal ? { signal: this.signal } : undefined,
      );
    } catch (error) {
      this.log.warn(
        { namespace: target.namespace, name: target.name, reason: event.reason, err: apiErrorMessage(error) },
        "Failed to record event",
      );
    }
  }
}
