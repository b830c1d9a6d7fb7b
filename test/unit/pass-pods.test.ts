// The pods a pass decides on (src/controller/playbook/pass-pods.ts): a foreign pod under the run's
// name in the cache must not hide the alternate pod the controller has just created, or the next
// pass takes the run's pod for lost and creates a second attempt beside it (seen in CI: app-2
// created 25 ms after app-1-<uid>, and the run followed the wrong pod to its ceiling).
import { describe, expect, it } from "vitest";
import type { PodView } from "../../src/controller/objects.js";
import { passPods } from "../../src/controller/playbook/pass-pods.js";
import { decide } from "../../src/controller/playbook/reconcile.js";
import { alternatePodName } from "../../src/controller/pods/pod-builder.js";
import { playbook, pod, SETTINGS, T0 } from "./controller-fixtures.js";

const ALTERNATE = alternatePodName("nightly", 1, "uid-1");

/** nightly-1 with the run's controller reference, but not as the controller builds it. */
function foreignFirstPod(): PodView {
  const made = pod(1, { created: T0 });
  return {
    ...made,
    metadata: {
      ...made.metadata,
      uid: "someone-elses",
      annotations: {
        ...made.metadata.annotations,
        "playbook.dev/run-start-time": "2025-12-31T00:00:00.000Z",
      },
    },
  };
}

/** The first pass: nightly-1 is taken, so the controller creates the alternate pod. */
function firstPass() {
  const foreign = foreignFirstPod();
  const first = decide({
    playbook: playbook(),
    pods: [foreign],
    now: T0,
    settings: SETTINGS,
    takenPodNames: ["nightly-1"],
  });
  const create = first.actions.find((action) => action.type === "createPod");
  if (create?.type !== "createPod")
    throw new Error(`the first pass created no pod: ${JSON.stringify(first)}`);
  expect(create.pod.metadata.name).toBe(ALTERNATE);
  const created: PodView = {
    ...create.pod,
    metadata: { ...create.pod.metadata, uid: "alternate-uid", creationTimestamp: T0.toISOString() },
    status: { phase: "Pending" },
  } as PodView;
  const pending = first.pending ?? first.status;
  if (!pending?.startTime || !pending.planDigest) throw new Error("the first pass recorded no start");
  const start = {
    startTime: pending.startTime,
    podName: ALTERNATE,
    podUID: "alternate-uid",
    podAttempts: 1,
    planDigest: pending.planDigest,
  };
  return { foreign, created, start };
}

const noLiveRead = async (): Promise<PodView | undefined> => {
  throw new Error("no live read expected");
};

describe("the pods a pass decides on", () => {
  it("adds the pod just created when the cache shows only a foreign pod of the run: no second attempt", async () => {
    const { foreign, created, start } = firstPass();
    const pods = await passPods(playbook(), start, {
      cached: [foreign],
      created: [created],
      readLive: noLiveRead,
    });
    expect(pods.map((p) => p.metadata.name)).toEqual(["nightly-1", ALTERNATE]);
    const second = decide({
      playbook: playbook(),
      pods,
      now: T0,
      settings: SETTINGS,
      unrecordedStart: start,
    });
    expect(second.actions.filter((action) => action.type === "createPod")).toEqual([]);
  });

  it("reads the pod the unwritten start record names live once the memory of its create is gone", async () => {
    const { foreign, created, start } = firstPass();
    const asked: string[] = [];
    const readLive = async (name: string) => {
      asked.push(name);
      return created;
    };
    const pods = await passPods(playbook(), start, { cached: [foreign], created: [], readLive });
    expect(asked).toEqual([ALTERNATE]);
    expect(pods.map((p) => p.metadata.uid)).toEqual(["someone-elses", "alternate-uid"]);
  });

  it("takes a pod read live under the recorded name only with the recorded UID", async () => {
    const { foreign, created, start } = firstPass();
    const impostor = { ...created, metadata: { ...created.metadata, uid: "made-since" } };
    const pods = await passPods(playbook(), start, {
      cached: [foreign],
      created: [],
      readLive: async () => impostor,
    });
    expect(pods.map((p) => p.metadata.uid)).toEqual(["someone-elses"]);
  });

  it("lists a created pod once when the cache shows it too", async () => {
    const { created } = firstPass();
    const pods = await passPods(playbook(), undefined, {
      cached: [created],
      created: [created],
      readLive: noLiveRead,
    });
    expect(pods).toEqual([created]);
  });
});
