// The archive's runtime: per attempt (pod), the runner container's log followed through the API
// server (pods/log, follow=true: the kubelet's reader goes on across its rotation) into an
// AttemptUpload, and what came of it kept in memory for the reconcile (archive-status.ts). The
// keys are built here from the Playbook the controller reads; the store's credentials never
// leave the controller. A small record (attempt-<K>.log.json) beside each completed object lets a
// restarted controller say what it holds without reading it again.
import type { IncomingMessage } from "node:http";
import { setTimeout as sleep } from "node:timers/promises";
import type { Logger } from "pino";
import { z } from "zod";
import { LOG_ARCHIVE_REASONS, type LogArchiveFailure, type LogArchiveReason } from "../../api/log-archive.js";
import type { PlaybookStatus } from "../../api/playbook.js";
import type { RunnerReport } from "../../api/report.js";
import type { ApiClient } from "../../runtime/api-client.js";
import { apiErrorMessage, isNotFound } from "../../runtime/api-errors.js";
import type { ControllerMetrics } from "../metrics.js";
import { type PodView, RUNNER_CONTAINER, type StoredPlaybook } from "../objects.js";
import { nodeSilenceOf } from "../pods/node-lost.js";
import { attemptLogKey, attemptReportKey, type RunIdentity, recordKey } from "./archive-keys.js";
import { type AttemptArchive, wasArchiving } from "./archive-status.js";
import type { ArchiveStore } from "./archive-store.js";
import { ArchiveStoreError, AttemptUpload, DEFAULT_RETRY, type RetryBound } from "./attempt-upload.js";
import {
  cleanEnd,
  FOLLOW_WATCH_MS,
  type FollowCut,
  type FollowTimes,
  followCut,
  notWholeMessage,
  openRetryDelay,
} from "./follow-watch.js";
import { type Continuity, continuityGap, LogContinuity } from "./log-continuity.js";
import { type UploadEnd, uploadEnd, uploadVerdict } from "./upload-collect.js";
import { type ComposedAttempt, composeUploadedAttempt } from "./upload-compose.js";
import { shapeOf, UPLOAD_FLUSH_MS } from "./upload-plan.js";
import type { LogUploadSecrets } from "./upload-secret.js";

/** One attempt to follow: the run, its attempt number and its pod. */
export interface AttemptRef {
  run: RunIdentity;
  attempt: number;
  pod: string;
  podUID: string;
  /** maximums.archivedLogBytes for the run. */
  capBytes: number;
  /** The status said an archive of this attempt was under way: a controller before this one began it. */
  resumed: boolean;
}

export interface LogArchiverDeps {
  store: ArchiveStore;
  api: Pick<ApiClient, "openPodLog" | "readNamespacedPod">;
  log: Logger;
  /** Counts an attempt whose archive is not whole. */
  countFailure: (reason: LogArchiveFailure) => void;
  /** The run of this key looks again: its attempt's archive changed. */
  onChange: (key: string) => void;
  /** The pod as the cache shows it: gone, or its node stopped reporting (pods/node-lost.ts), is a lost node. */
  podOf: (namespace: string, pod: string) => PodView | undefined;
  partBytes?: number;
  retry?: RetryBound;
  /** Set: each attempt's runner uploads its own log (upload-collect.ts); its Secret goes once composed. */
  uploads?: Pick<LogUploadSecrets, "remove">;
}

/** How a follow ended: whole (neither), broken by its stream, or cut by the controller (follow-watch.ts). */
interface FollowEnd {
  lastByteAt?: number | undefined;
  broke?: string;
  cut?: FollowCut;
  /** What the runner's progress records in the stream say of it (log-continuity.ts). */
  continuity?: Continuity;
}

const RecordSchema = z.object({
  v: z.literal(1),
  bytes: z.number().int().min(0),
  sha256: z.string().regex(/^[0-9a-f]{64}$/),
  reason: z.enum(Object.values(LOG_ARCHIVE_REASONS) as [LogArchiveReason, ...LogArchiveReason[]]),
  message: z.string(),
});

const FAILURE_OF: Partial<Record<LogArchiveReason, LogArchiveFailure>> = {
  [LOG_ARCHIVE_REASONS.storeUnreachable]: "store_unreachable",
  [LOG_ARCHIVE_REASONS.capReached]: "cap_reached",
  [LOG_ARCHIVE_REASONS.nodeLost]: "node_lost",
  [LOG_ARCHIVE_REASONS.incomplete]: "incomplete",
};

export class LogArchiver {
  private readonly deps: LogArchiverDeps;
  private readonly attempts = new Map<string, AttemptArchive>();
  private readonly running = new Map<string, Promise<void>>();
  /** Ends one attempt's follow (its run is deleted), by pod UID. */
  private readonly stopOf = new Map<string, AbortController>();
  /** The `namespace/name` of each attempt's run, by pod UID. */
  private readonly runOf = new Map<string, string>();
  private readonly stopping = new AbortController();

  constructor(deps: LogArchiverDeps) {
    this.deps = deps;
  }

  get bucket(): string {
    return this.deps.store.bucket;
  }

  /** What is known of the attempt whose pod has this UID. */
  resultOf(podUID: string): AttemptArchive | undefined {
    return this.attempts.get(podUID);
  }

  /**
   * An earlier attempt of the run of this key whose archive ended while its status still says it
   * is being archived (archive-status.ts): the status says how it ended until the next begins.
   */
  earlierResultOf(key: string, status: PlaybookStatus | undefined): AttemptArchive | undefined {
    let found: AttemptArchive | undefined;
    for (const [uid, runKey] of this.runOf) {
      const archive = this.attempts.get(uid);
      if (runKey !== key || archive?.state !== "ended" || archive.attempt >= (status?.podAttempts ?? 0))
        continue;
      if (wasArchiving(status, archive.attempt) && (!found || archive.attempt > found.attempt))
        found = archive;
    }
    return found;
  }

  /** Begins archiving the attempt unless it is already archived or being archived. */
  follow(ref: AttemptRef): void {
    if (this.attempts.has(ref.podUID) || this.stopping.signal.aborted) return;
    const key = attemptLogKey(this.deps.store.prefix, ref.run, ref.attempt);
    this.attempts.set(ref.podUID, { podUID: ref.podUID, attempt: ref.attempt, state: "archiving", key });
    this.runOf.set(ref.podUID, `${ref.run.namespace}/${ref.run.name}`);
    const stop = new AbortController();
    this.stopOf.set(ref.podUID, stop);
    const work = this.archive(ref, key, AbortSignal.any([this.stopping.signal, stop.signal]))
      .catch((error: unknown) => {
        this.deps.log.error({ ...where(ref), err: String(error) }, "Log archive failed");
      })
      .finally(() => {
        this.running.delete(ref.podUID);
        this.stopOf.delete(ref.podUID);
      });
    this.running.set(ref.podUID, work);
  }

  /**
   * Puts the runner's report that decided the run (trusted: decide-ended.ts) beside its
   * attempt's log, as attempt-<K>.report.json; a failure is logged, never the run's.
   */
  keepReport(
    playbook: StoredPlaybook,
    status: PlaybookStatus,
    trusted: { podUID: string; report: RunnerReport },
  ): void {
    const { namespace = "", name, uid } = playbook.metadata;
    if (!uid || !status.podAttempts || trusted.podUID !== status.podUID || this.stopping.signal.aborted)
      return;
    const key = attemptReportKey(this.deps.store.prefix, { namespace, name, uid }, status.podAttempts);
    this.deps.store
      .putObject(key, JSON.stringify(trusted.report), "application/json")
      .catch((error: unknown) => {
        this.deps.log.warn(
          { namespace, name, key, err: messageOf(error) },
          "Could not archive runner report",
        );
      });
  }

  /**
   * The Playbook of this key is being deleted: its follows end, their uploads aborted, and none
   * begins again (archive-pass.ts starts none for a deleted Playbook), so nothing lands in its
   * folder once retention has emptied it.
   */
  async stopRun(key: string): Promise<void> {
    const ending: Promise<void>[] = [];
    for (const [uid, runKey] of this.runOf) {
      if (runKey !== key) continue;
      this.stopOf.get(uid)?.abort();
      const work = this.running.get(uid);
      if (work) ending.push(work);
    }
    await Promise.all(ending);
  }

  /** The Playbook of this key is gone: nothing more to remember of its attempts. */
  forgetRun(key: string): void {
    for (const [uid, runKey] of this.runOf)
      if (runKey === key && !this.running.has(uid)) {
        this.attempts.delete(uid);
        this.runOf.delete(uid);
      }
  }

  /** Ends every follow; their uploads are aborted (the next leader begins them again). */
  async stop(): Promise<void> {
    this.stopping.abort();
    await Promise.all(this.running.values());
  }

  private async archive(ref: AttemptRef, key: string, signal: AbortSignal): Promise<void> {
    const recorded = await this.deps.store.readJson(recordKey(key), RecordSchema).catch(() => undefined);
    if (recorded) {
      this.end(
        ref,
        recorded.reason,
        recorded.message,
        { key, bytes: recorded.bytes, sha256: recorded.sha256 },
        false,
      );
      return;
    }
    if (this.deps.uploads) {
      await this.collectUpload(ref, key, this.deps.uploads, signal);
      return;
    }
    const upload = new AttemptUpload({
      store: this.deps.store,
      key,
      capBytes: ref.capBytes,
      ...(this.deps.partBytes ? { partBytes: this.deps.partBytes } : {}),
      ...(this.deps.retry ? { retry: this.deps.retry } : {}),
      signal,
    });
    try {
      // A controller before this one may have left an upload of this attempt: it goes.
      for (const stray of await this.deps.store.listUploads(key))
        if (stray.key === key) await this.deps.store.abortUpload(stray.key, stray.uploadId);
      await this.deps.store.deletePrefix(upload.segmentPrefix, { uploads: false });
    } catch (error) {
      this.end(ref, LOG_ARCHIVE_REASONS.storeUnreachable, `the store did not answer: ${messageOf(error)}`);
      return;
    }
    let end: FollowEnd;
    const continuity = new LogContinuity();
    try {
      end = { ...(await this.followInto(ref, upload, continuity, signal)), continuity: continuity.result };
    } catch (error) {
      await upload.abort();
      // Stopping (the lead lost, or a shutdown): the next leader begins the attempt again.
      if (signal.aborted) return;
      this.end(ref, LOG_ARCHIVE_REASONS.storeUnreachable, `the store did not answer: ${messageOf(error)}`);
      return;
    }
    const whole = end.cut === undefined && end.broke === undefined;
    if (!whole && upload.receivedBytes === 0) {
      // Nothing arrived (no kubelet answered, the pod was gone): no empty object.
      await upload.abort();
      const [reason, message] = this.verdict(ref, { bytes: 0, leftOut: 0, received: 0 }, end);
      this.end(ref, reason, message);
      return;
    }
    let outcome: Awaited<ReturnType<AttemptUpload["finish"]>>;
    try {
      outcome = await upload.finish();
    } catch (error) {
      await upload.abort();
      if (signal.aborted) return;
      this.end(ref, LOG_ARCHIVE_REASONS.storeUnreachable, `the store did not answer: ${messageOf(error)}`);
      return;
    }
    const [reason, message] = this.verdict(ref, outcome, end);
    const log = { key, bytes: outcome.bytes, sha256: outcome.sha256 };
    await this.keepRecord(ref, log, reason, message);
    this.end(ref, reason, message, log);
  }

  /**
   * Follows the runner's log into the upload until its stream ends, breaks or is cut: opening it
   * is retried while the pod exists and is not lost (openRetryDelay); while it is open, the pod
   * as the cache shows it is looked at every FOLLOW_WATCH_MS, and the follow ends once the pod
   * is taken as lost (followCut); a stream that ends cleanly while the runner still runs is cut
   * (cleanEnd). A stream that breaks after bytes arrived is not opened again: the kubelet would
   * send the log from its start. Throws when stopping or when the store fails.
   */
  private async followInto(
    ref: AttemptRef,
    upload: AttemptUpload,
    continuity: LogContinuity,
    signal: AbortSignal,
  ): Promise<FollowEnd> {
    const times: FollowTimes = { openedAt: Date.now() };
    const podOf = () => this.deps.podOf(ref.run.namespace, ref.pod);
    const cut = new AbortController();
    let cutBy: FollowCut | undefined;
    let stream: IncomingMessage | undefined;
    const watch = setInterval(() => {
      if (cutBy) return;
      cutBy = followCut(podOf(), times, Date.now());
      if (!cutBy) return;
      cut.abort();
      stream?.destroy(new Error(cutBy.why));
    }, FOLLOW_WATCH_MS);
    const following = AbortSignal.any([signal, cut.signal]);
    try {
      for (let tries = 1; ; tries += 1) {
        try {
          stream = await this.deps.api.openPodLog(
            { namespace: ref.run.namespace, name: ref.pod, container: RUNNER_CONTAINER, follow: true },
            { signal: following },
          );
          break;
        } catch (error) {
          if (following.aborted) throw error;
          const delay = openRetryDelay(
            { notFound: isNotFound(error), tries },
            podOf(),
            times.openedAt,
            Date.now(),
          );
          if (delay === undefined) throw error;
          this.deps.log.info(
            { ...where(ref), err: apiErrorMessage(error), delayMs: delay },
            "Retrying log follow",
          );
          await sleep(delay, undefined, { signal: following });
        }
      }
      try {
        for await (const chunk of stream) {
          times.lastByteAt = Date.now();
          continuity.feed(chunk as Buffer);
          await upload.write(chunk as Buffer);
        }
      } finally {
        stream.destroy();
      }
      if (cutBy) return { lastByteAt: times.lastByteAt, cut: cutBy };
      const endedAt = Date.now();
      for (;;) {
        const settled = cleanEnd(podOf(), endedAt, Date.now());
        if (settled === "whole") return { lastByteAt: times.lastByteAt };
        if (settled !== "wait") return { lastByteAt: times.lastByteAt, cut: settled };
        await sleep(FOLLOW_WATCH_MS, undefined, { signal });
      }
    } catch (error) {
      if (signal.aborted || error instanceof ArchiveStoreError) throw error;
      if (cutBy) return { lastByteAt: times.lastByteAt, cut: cutBy };
      return {
        lastByteAt: times.lastByteAt,
        broke: isNotFound(error) ? "the pod was gone" : `the log stream broke: ${apiErrorMessage(error)}`,
      };
    } finally {
      clearInterval(watch);
    }
  }

  /**
   * Waits for the attempt to end as the cache shows its pod, then composes its object of what the
   * runner uploaded, records it and removes the attempt's Secret.
   */
  private async collectUpload(
    ref: AttemptRef,
    key: string,
    uploads: Pick<LogUploadSecrets, "remove">,
    signal: AbortSignal,
  ): Promise<void> {
    const { store } = this.deps;
    let end: UploadEnd | undefined;
    for (;;) {
      end = uploadEnd(this.deps.podOf(ref.run.namespace, ref.pod), Date.now());
      if (end) break;
      try {
        await sleep(FOLLOW_WATCH_MS, undefined, { signal });
      } catch {
        return;
      }
    }
    let composed: ComposedAttempt | undefined;
    const retry = this.deps.retry ?? DEFAULT_RETRY;
    for (let tries = 1; ; tries += 1) {
      try {
        // A controller before this one may have begun composing the attempt: that upload goes.
        for (const stray of await store.listUploads(key))
          if (stray.key === key) await store.abortUpload(stray.key, stray.uploadId);
        composed = await composeUploadedAttempt(store, key, await shapeOf(store, key, ref.capBytes));
        break;
      } catch (error) {
        if (signal.aborted) return;
        if (tries >= retry.tries) {
          this.end(
            ref,
            LOG_ARCHIVE_REASONS.storeUnreachable,
            `the store did not answer: ${messageOf(error)} (${tries} tries); the runner's segments stay until the run is deleted`,
          );
          return;
        }
        // The runner's segments are kept in the store: the composition waits for it to come back.
        try {
          await sleep(retry.firstWaitMs * 2 ** (tries - 1), undefined, { signal });
        } catch {
          return;
        }
      }
    }
    const [reason, message] = uploadVerdict(composed, end, {
      capBytes: ref.capBytes,
      flushMs: UPLOAD_FLUSH_MS,
    });
    const log = composed ? { key, bytes: composed.bytes, sha256: composed.sha256 } : undefined;
    if (log) await this.keepRecord(ref, log, reason, message);
    await uploads.remove(ref.run.namespace, ref.pod).catch((error: unknown) => {
      this.deps.log.warn({ ...where(ref), err: messageOf(error) }, "Could not remove log upload Secret");
    });
    this.end(ref, reason, message, log);
  }

  /** The record beside a completed object; a failure only costs a restart's recovery. */
  private async keepRecord(
    ref: AttemptRef,
    log: { key: string; bytes: number; sha256: string },
    reason: LogArchiveReason,
    message: string,
  ): Promise<void> {
    try {
      await this.deps.store.putObject(
        recordKey(log.key),
        JSON.stringify({ v: 1, bytes: log.bytes, sha256: log.sha256, reason, message }),
        "application/json",
      );
    } catch (error) {
      this.deps.log.warn({ ...where(ref), err: messageOf(error) }, "Could not write log archive record");
    }
  }

  private verdict(
    ref: AttemptRef,
    outcome: { bytes: number; leftOut: number; received: number },
    end: FollowEnd,
  ): [LogArchiveReason, string] {
    const kept = `${outcome.bytes} bytes archived`;
    const why = end.cut?.why ?? end.broke;
    if (why !== undefined) {
      const pod = this.deps.podOf(ref.run.namespace, ref.pod);
      const silence = end.cut?.silence ?? (pod ? nodeSilenceOf(pod) : undefined);
      const lost = pod === undefined || silence !== undefined;
      const message = notWholeMessage({ bytes: outcome.bytes, lastByteAt: end.lastByteAt, silence, why });
      return [lost ? LOG_ARCHIVE_REASONS.nodeLost : LOG_ARCHIVE_REASONS.incomplete, message];
    }
    if (ref.resumed)
      return [
        LOG_ARCHIVE_REASONS.incomplete,
        `${kept}; the controller restarted while the attempt ran: the archive begins at what the kubelet still kept`,
      ];
    const gap = end.continuity && continuityGap(end.continuity, this.runnerReported(ref));
    if (gap !== undefined) return [LOG_ARCHIVE_REASONS.incomplete, `${kept}; ${gap}`];
    if (outcome.leftOut > 0)
      return [
        LOG_ARCHIVE_REASONS.capReached,
        `${kept} of ${outcome.received}: ${outcome.leftOut} bytes past maximums.archivedLogBytes (${ref.capBytes}) were left out between the head and the tail`,
      ];
    return [LOG_ARCHIVE_REASONS.archived, kept];
  }

  /** The attempt's runner container ended with its report (the message it leaves on its end). */
  private runnerReported(ref: AttemptRef): boolean {
    const pod = this.deps.podOf(ref.run.namespace, ref.pod);
    const runner = pod?.status?.containerStatuses?.find((c) => c.name === RUNNER_CONTAINER);
    return (runner?.state?.terminated?.message ?? "") !== "";
  }

  private end(
    ref: AttemptRef,
    reason: LogArchiveReason,
    message: string,
    log?: { key: string; bytes: number; sha256: string },
    count = true,
  ): void {
    this.attempts.set(ref.podUID, {
      podUID: ref.podUID,
      attempt: ref.attempt,
      state: "ended",
      reason,
      message,
      ...(log ? { log: { bucket: this.deps.store.bucket, ...log } } : {}),
    });
    const failure = FAILURE_OF[reason];
    if (failure && count) this.deps.countFailure(failure);
    const fields = { ...where(ref), reason, message };
    if (failure) this.deps.log.warn(fields, "Archived log not whole");
    else this.deps.log.info(fields, "Archived log");
    this.deps.onChange(`${ref.run.namespace}/${ref.run.name}`);
  }
}

function where(ref: AttemptRef): Record<string, unknown> {
  return { namespace: ref.run.namespace, name: ref.run.name, pod: ref.pod, attempt: ref.attempt };
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/** The controller's archiver over the store its config names, or undefined when the archive is off (no bucket). */
export function logArchiverOf(
  store: ArchiveStore | undefined,
  deps: { clients: { api: LogArchiverDeps["api"] }; log: Logger },
  metrics: Pick<ControllerMetrics, "logArchiveFailures">,
  queue: { add(key: string): void },
  cache: { pod(key: string): PodView | undefined },
  uploads?: Pick<LogUploadSecrets, "remove">,
): LogArchiver | undefined {
  if (!store) return undefined;
  return new LogArchiver({
    ...(uploads ? { uploads } : {}),
    store,
    api: deps.clients.api,
    log: deps.log,
    podOf: (namespace, name) => cache.pod(`${namespace}/${name}`),
    countFailure: (reason) => metrics.logArchiveFailures.inc({ reason }),
    onChange: (key) => queue.add(key),
  });
}
