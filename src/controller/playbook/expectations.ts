// What the writer just wrote, remembered until the caches show it (as the Job controller's
// expectations do): a pod it created that the pod cache does not list yet, and the
// resourceVersion a status write went over, which the Playbook cache still holds until the
// write's watch event arrives.
import type { StartRecord } from "../decision.js";
import { keyOf, type PodView, type StoredPlaybook } from "../objects.js";

// How long a write is trusted while the cache has not shown it. Timed on the monotonic clock:
// it is about this process's cache lag, not about the run, whose decisions use the injected clock.
const EXPECTATION_MS = 30_000;
// How long a created pod is remembered without a record: longer than any start-record wait.
const UNRECORDED_MS = 10 * 60_000;

export class WriteExpectations {
  /** Pods created that the cache may not show yet, by pod key. */
  private readonly created = new Map<string, { pod: PodView; uid: string; at: number }>();
  /** The keys of `created` by owner UID, so a pass on one run does not walk a burst's every create. */
  private readonly createdByOwner = new Map<string, Set<string>>();
  /**
   * The start records of first pods this writer created, by Playbook UID, until a status write
   * records them: the record rides on the run's next status write.
   */
  private readonly unrecorded = new Map<string, { record: StartRecord; at: number }>();
  /** Status writes the cache may not show yet, by Playbook key: the resourceVersion written over. */
  private readonly written = new Map<string, { over: string; at: number }>();

  /** A pod this writer created that the cache does not show yet, if it is still trusted. */
  createdPod(namespace: string, name: string, ownerUid: string | undefined): PodView | undefined {
    const created = this.created.get(`${namespace}/${name}`);
    if (created && created.uid === ownerUid && performance.now() - created.at < EXPECTATION_MS)
      return created.pod;
    return undefined;
  }

  /** The pods this writer created in a namespace that the cache may not show yet. */
  createdPods(namespace: string): PodView[] {
    const now = performance.now();
    return [...this.created.values()]
      .filter((c) => c.pod.metadata.namespace === namespace && now - c.at < EXPECTATION_MS)
      .map((c) => c.pod);
  }

  /** The pods this writer created for the Playbook of that UID that the cache may not show yet. */
  createdPodsOf(ownerUid: string): PodView[] {
    const keys = this.createdByOwner.get(ownerUid);
    if (!keys) return [];
    const now = performance.now();
    const pods: PodView[] = [];
    for (const key of keys) {
      const created = this.created.get(key);
      if (created && now - created.at < EXPECTATION_MS) pods.push(created.pod);
    }
    return pods;
  }

  /** The cache showed the pod: the memory of its create is no longer needed. */
  sawPod(pod: PodView): void {
    this.forgetCreated(keyOf(pod.metadata));
  }

  /**
   * True while the cache still holds the Playbook as it was before this writer's last status
   * write: a pass on it would decide on old facts and its write would conflict.
   */
  isBehind(playbook: StoredPlaybook): boolean {
    const key = keyOf(playbook.metadata);
    const written = this.written.get(key);
    if (!written) return false;
    if (written.over === playbook.metadata.resourceVersion && performance.now() - written.at < EXPECTATION_MS)
      return true;
    this.written.delete(key);
    return false;
  }

  /** The writer created this pod (or found it already its own) for the Playbook of that UID. */
  createdNow(pod: PodView, uid: string): void {
    const now = performance.now();
    expire(this.created, now - EXPECTATION_MS, (key) => this.forgetCreated(key));
    const key = keyOf(pod.metadata);
    // Forgotten first, so the map's order stays the order of `at` (expire stops at the first kept).
    this.forgetCreated(key);
    this.created.set(key, { pod, uid, at: now });
    const owned = this.createdByOwner.get(uid);
    if (owned) owned.add(key);
    else this.createdByOwner.set(uid, new Set([key]));
  }

  private forgetCreated(key: string): void {
    const created = this.created.get(key);
    if (!created) return;
    this.created.delete(key);
    const owned = this.createdByOwner.get(created.uid);
    owned?.delete(key);
    if (owned?.size === 0) this.createdByOwner.delete(created.uid);
  }

  /** The writer created a run's first pod, whose start record no status holds yet. */
  createdUnrecorded(playbookUid: string, record: StartRecord): void {
    const now = performance.now();
    expire(this.unrecorded, now - UNRECORDED_MS);
    this.unrecorded.delete(playbookUid);
    this.unrecorded.set(playbookUid, { record, at: now });
  }

  /** A status write of the Playbook recorded its start (or the run ended): forgotten here. */
  recorded(playbookUid: string): void {
    this.unrecorded.delete(playbookUid);
  }

  /** The start record of a Playbook not written yet: one lookup per pass, no copy. */
  unrecordedStart(playbookUid: string): StartRecord | undefined {
    return this.unrecorded.get(playbookUid)?.record;
  }

  /** The writer wrote the Playbook's status over this resourceVersion. */
  wroteStatus(playbook: StoredPlaybook, over: string): void {
    this.written.set(keyOf(playbook.metadata), { over, at: performance.now() });
  }
}

/**
 * Drops the entries set before `before` from a map kept in the order of their `at`: from its
 * oldest, stopping at the first kept, so a burst of creates costs each one look, not a walk of
 * every entry (a launch of 2,000 runs spent 0.2 s of CPU in such walks).
 */
function expire(
  entries: Map<string, { at: number }>,
  before: number,
  forget: (key: string) => void = (key) => entries.delete(key),
): void {
  for (const [key, entry] of entries) {
    if (entry.at >= before) return;
    forget(key);
  }
}
