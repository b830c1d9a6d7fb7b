// Tasks in their own images on the real node (issue 20): each task runs in a container of its
// image, started by the agent from the runner's image; the runner keeps every decision. Every
// test runs under both ways the agent gets there (issue 32), a test file each: the runner image
// mounted as an image volume (what --agent-delivery auto picks on this node's containerd 2.x) and
// the runner container's postStart hook (forced). Three images built here (test/harness/task-images.ts): Debian (glibc, /bin/sh),
// musl (a dynamically linked musl program and musl's loader, no glibc, no shell) and static (one
// static binary, nothing else). In the two shell-less ones the agent's busybox runs `run:`.
// The task trees are seen from this machine's /proc: containerd runs the pod's processes here.
import { readFileSync } from "node:fs";
import type { V1Pod } from "@kubernetes/client-node";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { GROUP, VERSION } from "../../src/api/playbook.js";
import { realNode } from "../controller/reason-cases.js";
import {
  clients,
  condition,
  createPlaybook,
  eventually,
  kubectlResult,
  type PlaybookObject,
  podsOf,
  type RunningController,
  runnerLogs,
  startController,
  taskLines,
  waitForFinished,
} from "../controller/support.js";
import {
  createTestNamespace,
  deleteTestNamespace,
  marker,
  processesWithMarker,
} from "../harness/cluster-test.js";
import {
  type AgentLayout,
  importTaskImages,
  SPIN,
  TASK_IMAGE_KINDS,
  TASK_IMAGES,
  type TaskImageKind,
} from "../harness/task-images.js";

// Nothing listens on port 1 of the node's loopback: the pull fails at once, nothing leaves.
const UNPULLABLE = "127.0.0.1:1/none:1";
const FORBIDDEN = "registry.example/forbidden:1";

const literal = (text: string) => text.replace(/[/.]/g, "\\$&");

/** What spin says its libc is, and the shell that runs `run:` (the image's own, or the agent's busybox). */
const expectedOf = (busybox: string): Record<TaskImageKind, { kind: string; shell: RegExp }> => ({
  debian: { kind: "debian-glibc", shell: /^shell \/(usr\/)?bin\/dash$/m },
  musl: { kind: "musl-dynamic", shell: new RegExp(`^shell ${literal(busybox)}$`, "m") },
  static: { kind: "static", shell: new RegExp(`^shell ${literal(busybox)}$`, "m") },
});

const { core } = clients();
const log = (message: string) => process.stderr.write(`[task-images] ${message}\n`);
let namespace = "";
let restricted = "";
let controller: RunningController | undefined;

async function allowImages(ns: string, images: string[]): Promise<void> {
  const policy = {
    apiVersion: `${GROUP}/${VERSION}`,
    kind: "PlaybookPolicy",
    metadata: { name: "default", namespace: ns },
    spec: { allowedImages: images },
  };
  const applied = await kubectlResult(["apply", "--server-side", "-f", "-"], JSON.stringify(policy));
  expect(applied.stderr).toBe("");
}

export function taskImagesSuite({ setting, delivery, agentDir }: AgentLayout): void {
  describe(`with the agent delivered by ${delivery}`, () => {
    const EXPECTED = expectedOf(`${agentDir}/busybox`);

    beforeAll(async () => {
      await importTaskImages(inject("kubeconfig"), log);
      namespace = await createTestNamespace(core, "rn-images");
      restricted = await createTestNamespace(core, "rn-restricted", {
        "pod-security.kubernetes.io/enforce": "restricted",
        "pod-security.kubernetes.io/enforce-version": "latest",
      });
      for (const ns of [namespace, restricted]) await allowImages(ns, ["playbook.test/*", UNPULLABLE]);
      controller = startController([namespace, restricted], {
        ...realNode.controller,
        agentDelivery: setting,
      });
    });
    afterAll(async () => {
      await controller?.stop();
      for (const ns of [namespace, restricted]) if (ns) await deleteTestNamespace(core, ns);
    });

    function environOf(pid: number): string {
      return readFileSync(`/proc/${pid}/environ`, "latin1");
    }

    function sessionOf(pid: number): number {
      const stat = readFileSync(`/proc/${pid}/stat`, "latin1");
      // After the command: state, ppid, pgrp, session.
      return Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[3]);
    }

    /**
     * Waits for the tree of `spin tree MARK` (leader, the orphaned grandchild holding the pipes and
     * the escapee in a session of its own without environment) and checks what each one is.
     */
    async function treeUp(mark: string): Promise<number[]> {
      const cmdline = (pid: number) => {
        try {
          return readFileSync(`/proc/${pid}/cmdline`, "latin1").split("\0");
        } catch {
          return []; // gone meanwhile
        }
      };
      // By role, not by count: a forked child has its parent's command line until it execs, so
      // three processes with the mark can be seen before the grandchild is there.
      const pids = await eventually(
        `the task's leader, grandchild and escapee with ${mark}`,
        async () => {
          const found = processesWithMarker(mark);
          const roles = found.map(cmdline);
          const up =
            roles.some((args) => args[1] === "tree") &&
            roles.some((args) => args.includes("grandchild")) &&
            roles.some((args) => args.includes("escaped"));
          return up ? found : undefined;
        },
        realNode.taskStartMs,
      );
      const escaped = pids.find((pid) => cmdline(pid).includes("escaped"));
      const leader = pids.find((pid) => cmdline(pid)[1] === "tree");
      expect(escaped).toBeDefined();
      expect(leader).toBeDefined();
      expect(pids.some((pid) => cmdline(pid).includes("grandchild"))).toBe(true);
      if (escaped !== undefined && leader !== undefined) {
        expect(environOf(escaped)).toBe("");
        expect(sessionOf(escaped)).not.toBe(sessionOf(leader));
      }
      return pids;
    }

    /** The run's pod is over: its phase is terminal and every container terminated. */
    async function podCompleted(ns: string, name: string): Promise<V1Pod> {
      return eventually(
        `pod ${name}-1 to complete`,
        async () => {
          const [pod] = await podsOf(ns, name);
          const statuses = [...(pod?.status?.containerStatuses ?? [])];
          const done =
            (pod?.status?.phase === "Succeeded" || pod?.status?.phase === "Failed") &&
            statuses.length > 0 &&
            statuses.every((s) => s.state?.terminated !== undefined);
          return done ? pod : undefined;
        },
        60_000,
      );
    }

    function reasonOf(playbook: PlaybookObject) {
      return condition(playbook, "Succeeded");
    }

    describe.each(TASK_IMAGE_KINDS)("tasks in the %s image on the real node", (kind) => {
      const image = TASK_IMAGES[kind];
      const expected = EXPECTED[kind];

      it("Succeeded: runs in its image as uid 1000, with the image's shell or the agent's, output order kept per stream", async () => {
        const name = `ok-${kind}`;
        await createPlaybook(namespace, name, {
          ceiling: "2m",
          tasks: [
            { name: "hello", image, run: `${SPIN} hello\n${SPIN} shell $$\npwd` },
            { name: "order", image, run: `${SPIN} order 300` },
          ],
        });
        const playbook = await waitForFinished(namespace, name, realNode.finishMs);
        expect(reasonOf(playbook)).toMatchObject({ status: "True", reason: "Succeeded" });
        expect(playbook.status?.tasks?.map((t) => t.phase)).toEqual(["Succeeded", "Succeeded"]);
        const logs = await runnerLogs(namespace, name);
        const hello = taskLines(logs, "hello");
        expect(hello).toContain(`spin ${expected.kind} uid 1000`);
        expect(hello.join("\n")).toMatch(expected.shell);
        expect(hello).toContain("/workspace");
        const order = taskLines(logs, "order");
        const numbers = (stream: string) =>
          order.filter((line) => line.startsWith(`${stream} `)).map((line) => Number(line.split(" ")[1]));
        const upTo300 = Array.from({ length: 300 }, (_, i) => i + 1);
        expect(numbers("out")).toEqual(upTo300);
        expect(numbers("err")).toEqual(upTo300);
        const [pod] = await podsOf(namespace, name);
        const task = pod?.spec?.containers.find((c) => c.image === image);
        expect(task).toMatchObject({
          command: [`${agentDir}/agent`, "/playbook/run/runner.sock", task?.name],
        });
      });

      const treeCases = [
        {
          limit: "TaskTimeout",
          spec: (mark: string) => ({
            ceiling: "2m",
            killGrace: "1s",
            tasks: [
              { name: "tree", image, run: `${SPIN} tree ${mark} loud`, timeout: "4s" },
              { name: "after", image, run: `${SPIN} hello` },
            ],
          }),
        },
        {
          limit: "StallLimit",
          spec: (mark: string) => ({
            ceiling: "2m",
            killGrace: "1s",
            stall: "4s",
            tasks: [
              { name: "tree", image, run: `${SPIN} tree ${mark} quiet` },
              { name: "after", image, run: `${SPIN} hello` },
            ],
          }),
        },
        {
          limit: "RunCeiling",
          spec: (mark: string) => ({
            // Long enough for a pod of two containers to start on a loaded node before it passes.
            ceiling: "20s",
            killGrace: "1s",
            tasks: [
              { name: "tree", image, run: `${SPIN} tree ${mark} loud` },
              { name: "after", image, run: `${SPIN} hello` },
            ],
          }),
        },
      ];
      it.each(treeCases)(
        "$limit: the whole tree dies (a grandchild holding the pipes, an escapee in its own session without env)",
        async ({ limit, spec }) => {
          const name = `${limit.toLowerCase()}-${kind}`;
          const mark = marker();
          await createPlaybook(namespace, name, spec(mark));
          const pids = await treeUp(mark);
          const playbook = await waitForFinished(namespace, name, realNode.finishMs);
          expect(reasonOf(playbook)).toMatchObject({ status: "False", reason: limit });
          expect(playbook.status?.tasks?.[0]).toMatchObject({
            name: "tree",
            phase: "TimedOut",
            limit,
            ending: "Killed",
          });
          expect(playbook.status?.tasks?.[1]).toMatchObject({ name: "after", phase: "Skipped" });
          // Every process of the tree is gone, and so is the pod: every container ended.
          await eventually(
            "the tree to be gone",
            async () => (processesWithMarker(mark).length === 0 ? true : undefined),
            10_000,
          );
          expect(pids.length).toBeGreaterThanOrEqual(3);
          const pod = await podCompleted(namespace, name);
          expect(
            pod.status?.containerStatuses?.find((s) => s.name === "runner")?.state?.terminated,
          ).toBeDefined();
          const logs = await runnerLogs(namespace, name);
          expect(taskLines(logs, "tree")[0]).toBe(`tree up (${expected.kind})`);
        },
      );

      it("a cooperative task sees the cancel file in its own container and ends Exited", async () => {
        const name = `cancel-${kind}`;
        await createPlaybook(namespace, name, {
          ceiling: "2m",
          killGrace: "20s",
          tasks: [{ name: "polite", image, run: `${SPIN} cooperate`, timeout: "4s" }],
        });
        const playbook = await waitForFinished(namespace, name, realNode.finishMs);
        expect(reasonOf(playbook)).toMatchObject({ status: "False", reason: "TaskTimeout" });
        expect(playbook.status?.tasks?.[0]).toMatchObject({
          phase: "TimedOut",
          limit: "TaskTimeout",
          ending: "Exited",
        });
        const lines = taskLines(await runnerLogs(namespace, name), "polite");
        expect(lines[0]).toMatch(/^waiting for \/playbook\/run\/\S+/);
        expect(lines).toContain(`cancel file seen: ${lines[0]?.slice("waiting for ".length)}`);
      });
    });

    describe("Playbooks across images on the real node", () => {
      it("passes files through /workspace from a task in one image to the next in another", async () => {
        const name = "relay";
        await createPlaybook(namespace, name, {
          ceiling: "2m",
          tasks: [
            // Relative: /workspace is the default working directory.
            { name: "make", image: TASK_IMAGES.debian, run: "echo from debian > relay.txt" },
            {
              name: "pass",
              image: TASK_IMAGES.musl,
              run: `${SPIN} hello >> /workspace/relay.txt\necho from musl >> /workspace/relay.txt`,
            },
            { name: "show", image: TASK_IMAGES.static, run: `${SPIN} cat /workspace/relay.txt` },
            { name: "back", image: TASK_IMAGES.debian, run: "wc -l < /workspace/relay.txt" },
          ],
        });
        const playbook = await waitForFinished(namespace, name, realNode.finishMs);
        expect(reasonOf(playbook)).toMatchObject({ status: "True", reason: "Succeeded" });
        const logs = await runnerLogs(namespace, name);
        // task-2 (uid 1001) appended to what task-1 (uid 1000) made: the group may write it.
        expect(taskLines(logs, "show")).toEqual(["from debian", "spin musl-dynamic uid 1001", "from musl"]);
        expect(taskLines(logs, "back")).toEqual(["3"]);
        const [pod] = await podsOf(namespace, name);
        // One container per distinct image, in first-use order, besides the runner.
        expect(pod?.spec?.containers.map((c) => [c.name, c.image])).toEqual([
          ["runner", inject("runnerImage")],
          ["task-1", TASK_IMAGES.debian],
          ["task-2", TASK_IMAGES.musl],
          ["task-3", TASK_IMAGES.static],
        ]);
        expect(pod?.spec?.shareProcessNamespace).toBe(true);
      });

      // The task container's limit is its own (spec.resources apply to each task container): the
      // kernel chooses among the agent and the tasks (oom_score_adj 1000). On this node's cgroup v1 it
      // ends the hog alone: the agent lives and reports the task killed by SIGKILL, and the kubelet
      // says nothing (the container did not end). Where the whole container ends (cgroup v2's
      // memory.oom.group, or the agent taken) the controller names the container and the kubelet's
      // OOMKilled. Either way TaskFailed, never RunnerLost: the runner's container is untouched.
      it("a task container run into its memory limit fails the task (TaskFailed, the container and OOMKilled named when it ended)", async () => {
        const name = "hog";
        await createPlaybook(namespace, name, {
          ceiling: "2m",
          killGrace: "0s",
          resources: { limits: { cpu: "500m", memory: "64Mi" } },
          tasks: [
            { name: "hog", image: TASK_IMAGES.musl, run: `${SPIN} hog 256` },
            { name: "after", image: TASK_IMAGES.debian, run: "echo never" },
          ],
        });
        const playbook = await waitForFinished(namespace, name, realNode.finishMs);
        const succeeded = reasonOf(playbook);
        log(`hog: ${succeeded?.message}`);
        expect(succeeded).toMatchObject({ status: "False", reason: "TaskFailed" });
        expect(playbook.status?.tasks?.[0]).toMatchObject({ name: "hog", phase: "Failed" });
        const message = playbook.status?.tasks?.[0]?.message ?? "";
        expect(message).toMatch(
          /^(exited with code 137|was killed by SIGKILL|container task-1 \(image playbook\.test\/musl:1\) was OOMKilled \(exit 137\))/,
        );
        expect(playbook.status?.tasks?.[1]).toMatchObject({ name: "after", phase: "Skipped" });
        const [pod] = await podsOf(namespace, name);
        const statuses = pod?.status?.containerStatuses ?? [];
        // The runner ended on its own, with its report (exit 1: a failed run), not killed.
        expect(statuses.find((s) => s.name === "runner")?.state?.terminated).toMatchObject({ exitCode: 1 });
        const task = statuses.find((s) => s.name === "task-1")?.state?.terminated;
        if (message.startsWith("container task-1")) expect(task).toMatchObject({ reason: "OOMKilled" });
      });

      it("an image that cannot be pulled ends the run StartTimeout naming the image and the kubelet's reason", async () => {
        const name = "unpullable";
        await createPlaybook(namespace, name, {
          ceiling: "1m",
          startTimeout: "20s",
          tasks: [
            { name: "first", image: TASK_IMAGES.debian, run: "echo never" },
            { name: "second", image: UNPULLABLE, run: "echo never" },
          ],
        });
        const playbook = await waitForFinished(namespace, name, 90_000);
        const succeeded = reasonOf(playbook);
        log(`unpullable: ${succeeded?.message}`);
        expect(succeeded).toMatchObject({ status: "False", reason: "StartTimeout" });
        expect(succeeded?.message).toContain("task-2");
        expect(succeeded?.message).toContain(UNPULLABLE);
        expect(succeeded?.message).toMatch(/ErrImagePull|ImagePullBackOff/);
      });

      it("a task image outside allowedImages is refused InvalidSpec naming spec.tasks[i].image", async () => {
        const name = "forbidden";
        await createPlaybook(namespace, name, {
          ceiling: "1m",
          tasks: [
            { name: "first", image: TASK_IMAGES.debian, run: "true" },
            { name: "second", image: FORBIDDEN, run: "true" },
          ],
        });
        const playbook = await waitForFinished(namespace, name, 30_000);
        const succeeded = reasonOf(playbook);
        expect(succeeded).toMatchObject({ status: "False", reason: "InvalidSpec" });
        expect(succeeded?.message).toContain("spec.tasks[1].image");
        expect(succeeded?.message).toContain(FORBIDDEN);
        expect(await podsOf(namespace, name)).toEqual([]);
      });

      it("the pod is admitted, and runs, in a namespace that enforces the restricted Pod Security Standard", async () => {
        // The namespace does enforce: a pod without the restricted fields is refused.
        const refused = await core
          .createNamespacedPod({
            namespace: restricted,
            body: {
              metadata: { name: "plain" },
              spec: { containers: [{ name: "c", image: TASK_IMAGES.debian, command: ["true"] }] },
            },
          })
          .then(
            () => "admitted",
            (error: unknown) => String((error as { body?: unknown }).body ?? error),
          );
        // The API server's Status, as JSON: its quotes escaped.
        expect(refused).toMatch(/violates PodSecurity \\?"restricted:latest\\?"/);
        const name = "restricted";
        await createPlaybook(restricted, name, {
          ceiling: "2m",
          tasks: [
            { name: "one", image: TASK_IMAGES.debian, run: "id -u" },
            { name: "two", image: TASK_IMAGES.musl, run: `${SPIN} hello` },
            { name: "three", image: TASK_IMAGES.static, run: `${SPIN} hello` },
          ],
        });
        const playbook = await waitForFinished(restricted, name, realNode.finishMs);
        expect(reasonOf(playbook)).toMatchObject({ status: "True", reason: "Succeeded" });
        const logs = await runnerLogs(restricted, name);
        expect(taskLines(logs, "one")).toEqual(["1000"]);
        // Each task container as a user of its own: task-3 is 1002.
        expect(taskLines(logs, "three")).toEqual(["spin static uid 1002"]);
      });
    });

    it("builds every pod with one way in, never both: the agent volume is an image or an emptyDir filled by the runner's hook", async () => {
      const name = `layout-${delivery}`;
      await createPlaybook(namespace, name, { ceiling: "1m", tasks: [{ name: "one", run: "true" }] });
      await waitForFinished(namespace, name, realNode.finishMs);
      const [pod] = await podsOf(namespace, name);
      const agent = pod?.spec?.volumes?.find((volume) => volume.name === "playbook-agent");
      const runner = pod?.spec?.containers.find((container) => container.name === "runner");
      expect(pod?.spec?.initContainers).toBeUndefined();
      if (delivery === "image-volume") {
        expect(agent?.image?.reference).toBe(inject("runnerImage"));
        expect(agent?.emptyDir).toBeUndefined();
        expect(runner?.lifecycle).toBeUndefined();
      } else {
        expect(agent?.emptyDir).toBeDefined();
        expect(agent?.image).toBeUndefined();
        expect(runner?.lifecycle?.postStart?.exec?.command).toEqual([
          "/usr/local/lib/playbook/agent",
          "--install",
          "/playbook/agent",
        ]);
      }
    });
  });
}
