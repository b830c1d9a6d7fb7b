// The pods one pass decides on: the ones the cache shows controlled by the run, and the ones it
// may not show yet. A pass that misses the pod this controller just created takes the run's pod
// for lost and creates the next attempt beside it (as a foreign pod under the run's name once
// made it do: the cache listed that one, not the alternate the controller had just created).
import type { StartRecord } from "../decision.js";
import type { PodView, StoredPlaybook } from "../objects.js";
import { isFinished } from "../status.js";

export interface PassPodSources {
  /** The pods the cache shows controlled by the run's UID. */
  cached: readonly PodView[];
  /** The run's pods this controller created that the cache may not show yet. */
  created: readonly PodView[];
  /** A live read of the run's pod of that name; undefined when there is none the run controls. */
  readLive(name: string): Promise<PodView | undefined>;
}

/**
 * The cached pods, plus the pod the run's status (or its start record not written yet) names when
 * the cache lacks it: from the memory of its create, else a live read that confirms it is really
 * gone before the pass acts on its absence. With no pod named, every remembered create is added.
 */
export async function passPods(
  playbook: StoredPlaybook,
  unrecordedStart: StartRecord | undefined,
  sources: PassPodSources,
): Promise<PodView[]> {
  const status = playbook.status ?? {};
  const { cached, created } = sources;
  const start = status.startTime === undefined ? unrecordedStart : undefined;
  const expected = status.podName ?? start?.podName;
  if (!expected) return withCreated(cached, created);
  const recordedUid = status.podUID ?? start?.podUID;
  const isIt = (pod: PodView) =>
    pod.metadata.name === expected && (recordedUid === undefined || pod.metadata.uid === recordedUid);
  if (isFinished(status) || cached.some(isIt)) return [...cached];
  const remembered = created.find(isIt);
  if (remembered) return [...cached, remembered];
  // The pod the status names, and only the one it recorded: a pod of that name made since is not it.
  const live = await sources.readLive(expected);
  return live && isIt(live) ? [...cached, live] : [...cached];
}

/** The cached pods and, once each, the created ones the cache does not list yet. */
function withCreated(cached: readonly PodView[], created: readonly PodView[]): PodView[] {
  const listed = new Set(cached.map((pod) => pod.metadata.uid));
  return [...cached, ...created.filter((pod) => !listed.has(pod.metadata.uid))];
}
