// A task's Secret on a real kubelet, under both ways the agent reaches the task containers: the task
// naming it reads it through env and a volume, and what it prints of it shows as ***; another task, in the same image and in another,
// cannot read it by its env, a file or another container's /proc; the value is nowhere in the
// Playbook, its events or the controller's log; a missing key, a secret volume naming a missing
// Secret and a missing claim each end the run in seconds, naming it, and a missing optional
// volume is no error; a claim on a `local` PersistentVolume keeps what one run wrote for the next.
import { chmodSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { stringify } from "yaml";
import { realNode } from "../controller/reason-cases.js";
import {
  clients,
  condition,
  createPlaybook,
  kubectl,
  kubectlResult,
  type RunningController,
  runnerLogs,
  startController,
  startLoggedController,
  taskLines,
  waitForFinished,
} from "../controller/support.js";
import { createTestNamespace, deleteTestNamespace } from "../harness/cluster-test.js";
import { AGENT_LAYOUTS, importTaskImages, TASK_IMAGES } from "../harness/task-images.js";

const VALUE = "pw-7f3a9c-only-in-the-secret";
// What the prying tasks look for: a part of the value, so that the spec never holds the whole.
const PART = VALUE.slice(3);
const { core } = clients();
const log = (message: string) => process.stderr.write(`[secrets] ${message}\n`);
let namespace = "";
const controllers: RunningController[] = [];

beforeAll(async () => {
  await importTaskImages(inject("kubeconfig"), log);
  namespace = await createTestNamespace(core, "rn-secrets", {
    "pod-security.kubernetes.io/enforce": "restricted",
  });
  await kubectl(["-n", namespace, "apply", "-f", "-"], {
    input: [
      stringify({
        apiVersion: "v1",
        kind: "Secret",
        metadata: { name: "db" },
        stringData: { password: VALUE },
      }),
      stringify({
        apiVersion: "playbook.dev/v1alpha1",
        kind: "PlaybookPolicy",
        metadata: { name: "default" },
        spec: { allowedImages: [TASK_IMAGES.debian] },
      }),
    ].join("---\n"),
  });
});
afterAll(async () => {
  await Promise.all(controllers.map((c) => c.stop()));
  if (namespace) await deleteTestNamespace(core, namespace);
});

/**
 * A task that tries every path to the value it was not given: its env, files it can see, and every
 * process's environment and root (the reader's agent still holds the value in its environment).
 */
const PRY = [
  'if [ -n "$PGPASSWORD" ]; then echo env:set; else echo env:none; fi',
  `grep -rl "${PART}" /workspace /run /playbook 2>/dev/null | head -1 | sed 's/^/file:/' || true`,
  `for p in /proc/[0-9]*; do cat $p/environ 2>/dev/null | tr '\\0' '\\n' | grep -q "${PART}" && echo "proc:$p"; done; true`,
  `for p in /proc/[0-9]*; do grep -rqs "${PART}" $p/root/secret 2>/dev/null && echo "root:$p"; done; true`,
  "echo pried",
].join("\n");

describe.each(AGENT_LAYOUTS)("with the agent delivered by $delivery", ({ setting, delivery }) => {
  let controllerLog = () => "";
  beforeAll(async () => {
    await Promise.all(controllers.splice(0).map((c) => c.stop()));
    const controller = startLoggedController([namespace], { ...realNode.controller, agentDelivery: setting });
    controllerLog = controller.log;
    controllers.push(controller);
  });

  it("gives the Secret to the task naming it alone, and shows its value nowhere in the Playbook", async () => {
    const name = `secret-${delivery}`;
    await createPlaybook(namespace, name, {
      ceiling: "3m",
      volumes: [{ name: "secret", secret: { secretName: "db" } }],
      tasks: [
        {
          name: "reader",
          // Both reads compared in the task, then printed: the pod's log shows each only as ***.
          run: `test "$PGPASSWORD" = "$(cat /secret/password)" && test -n "$PGPASSWORD" && echo same
echo "env=$PGPASSWORD"; cat /secret/password; echo`,
          env: [{ name: "PGPASSWORD", valueFrom: { secretKeyRef: { name: "db", key: "password" } } }],
          volumeMounts: [{ name: "secret", mountPath: "/secret", readOnly: true }],
        },
        { name: "same-image", run: PRY },
        { name: "other-image", image: TASK_IMAGES.debian, run: PRY },
      ],
    });
    const ended = await waitForFinished(namespace, name, realNode.finishMs);
    expect(condition(ended, "Succeeded")).toMatchObject({ status: "True", reason: "Succeeded" });
    const logs = await runnerLogs(namespace, name);
    expect(taskLines(logs, "reader")).toEqual(["same", "env=***", "***"]);
    expect(logs).not.toContain(PART);
    expect(taskLines(logs, "same-image")).toEqual(["env:none", "pried"]);
    expect(taskLines(logs, "other-image")).toEqual(["env:none", "pried"]);
    const shown = await kubectlResult(["-n", namespace, "get", "pb", name, "-o", "yaml"]);
    const events = await kubectlResult(["-n", namespace, "get", "events", "-o", "yaml"]);
    expect(shown.stdout).not.toContain(VALUE);
    expect(events.stdout).not.toContain(VALUE);
    // The controller's own log, every level: it speaks of this run, and never of the value.
    expect(controllerLog()).toContain(name);
    expect(controllerLog()).not.toContain(PART);
  });

  it("ends a run naming a key the Secret lacks within seconds, naming the key", async () => {
    const name = `nokey-${delivery}`;
    await createPlaybook(namespace, name, {
      ceiling: "3m",
      startTimeout: "2m",
      tasks: [
        {
          name: "reader",
          run: "true",
          env: [{ name: "P", valueFrom: { secretKeyRef: { name: "db", key: "nope" } } }],
        },
      ],
    });
    // Well inside the 2m start timeout: the kubelet's CreateContainerConfigError ends it.
    const ended = await waitForFinished(namespace, name, 60_000);
    const succeeded = condition(ended, "Succeeded");
    expect(succeeded).toMatchObject({ status: "False", reason: "InvalidSpec" });
    expect(succeeded?.message).toContain("CreateContainerConfigError");
    expect(succeeded?.message).toContain("nope");
  });
});

describe("a volume naming what does not exist", () => {
  beforeAll(async () => {
    await Promise.all(controllers.splice(0).map((c) => c.stop()));
    controllers.push(startController([namespace], { ...realNode.controller }));
  });

  it("ends a run whose secret volume names a missing Secret within seconds, in the kubelet's words", async () => {
    await createPlaybook(namespace, "novolume", {
      ceiling: "3m",
      startTimeout: "2m",
      volumes: [{ name: "creds", secret: { secretName: "absent" } }],
      tasks: [
        {
          name: "reader",
          run: "true",
          volumeMounts: [{ name: "creds", mountPath: "/creds", readOnly: true }],
        },
      ],
    });
    // Well inside the 2m start timeout: the kubelet's FailedMount event ends it.
    const ended = await waitForFinished(namespace, "novolume", 60_000);
    const succeeded = condition(ended, "Succeeded");
    expect(succeeded).toMatchObject({ status: "False", reason: "InvalidSpec" });
    expect(succeeded?.message).toContain(
      'FailedMount: MountVolume.SetUp failed for volume "creds" : secret "absent" not found',
    );
  });

  it("ends a run naming a missing claim within seconds, in the scheduler's words", async () => {
    await createPlaybook(namespace, "noclaim", {
      ceiling: "3m",
      startTimeout: "2m",
      volumes: [{ name: "data", persistentVolumeClaim: { claimName: "no-such-claim" } }],
      tasks: [{ name: "writer", run: "true", volumeMounts: [{ name: "data", mountPath: "/data" }] }],
    });
    const ended = await waitForFinished(namespace, "noclaim", 60_000);
    const succeeded = condition(ended, "Succeeded");
    expect(succeeded).toMatchObject({ status: "False", reason: "InvalidSpec" });
    expect(succeeded?.message).toContain('persistentvolumeclaim "no-such-claim" not found');
  });

  it("runs with a missing optional secret volume", async () => {
    await createPlaybook(namespace, "optional", {
      ceiling: "3m",
      volumes: [{ name: "maybe", secret: { secretName: "absent", optional: true } }],
      tasks: [
        {
          name: "reader",
          run: "ls /maybe | wc -l",
          volumeMounts: [{ name: "maybe", mountPath: "/maybe", readOnly: true }],
        },
      ],
    });
    const ended = await waitForFinished(namespace, "optional", realNode.finishMs);
    expect(condition(ended, "Succeeded")).toMatchObject({ status: "True", reason: "Succeeded" });
    expect(taskLines(await runnerLogs(namespace, "optional"), "reader")).toEqual(["0"]);
  });
});

describe("a PersistentVolumeClaim", () => {
  // The dev cluster has no provisioner: the test makes a `local` PersistentVolume on this node's
  // disk (docs/secrets.md, "On the dev cluster"), open to the tasks' users.
  let dir = "";
  let pv = "";
  beforeAll(async () => {
    dir = mkdtempSync(path.join(tmpdir(), "pb-pv-"));
    pv = `pb-pv-${path
      .basename(dir)
      .slice(6)
      .toLowerCase()
      .replace(/[^a-z0-9]/g, "")}`;
    chmodSync(dir, 0o777);
    await Promise.all(controllers.splice(0).map((c) => c.stop()));
    controllers.push(startController([namespace], { ...realNode.controller }));
    await kubectl(["apply", "-f", "-"], {
      input: stringify({
        apiVersion: "v1",
        kind: "PersistentVolume",
        metadata: { name: pv },
        spec: {
          capacity: { storage: "64Mi" },
          accessModes: ["ReadWriteOnce"],
          storageClassName: "local-test",
          claimRef: { namespace, name: "dumps" },
          local: { path: dir },
          nodeAffinity: {
            required: {
              nodeSelectorTerms: [
                { matchExpressions: [{ key: "kubernetes.io/hostname", operator: "Exists" }] },
              ],
            },
          },
        },
      }),
    });
    await kubectl(["-n", namespace, "apply", "-f", "-"], {
      input: stringify({
        apiVersion: "v1",
        kind: "PersistentVolumeClaim",
        metadata: { name: "dumps" },
        spec: {
          accessModes: ["ReadWriteOnce"],
          storageClassName: "local-test",
          resources: { requests: { storage: "64Mi" } },
        },
      }),
    });
  });
  afterAll(async () => {
    if (pv) await kubectlResult(["delete", "pv", pv, "--ignore-not-found", "--wait=false"]);
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it("is written by one run and read by the next", async () => {
    const volumes = [{ name: "dumps", persistentVolumeClaim: { claimName: "dumps" } }];
    const volumeMounts = [{ name: "dumps", mountPath: "/dumps" }];
    await createPlaybook(namespace, "pv-write", {
      ceiling: "3m",
      volumes,
      tasks: [{ name: "write", run: "echo from-the-first-run > /dumps/note", volumeMounts }],
    });
    const written = await waitForFinished(namespace, "pv-write", realNode.finishMs);
    expect(condition(written, "Succeeded")).toMatchObject({ status: "True", reason: "Succeeded" });
    await createPlaybook(namespace, "pv-read", {
      ceiling: "3m",
      volumes,
      tasks: [{ name: "read", run: "cat /dumps/note", volumeMounts }],
    });
    const read = await waitForFinished(namespace, "pv-read", realNode.finishMs);
    expect(condition(read, "Succeeded")).toMatchObject({ status: "True", reason: "Succeeded" });
    expect(taskLines(await runnerLogs(namespace, "pv-read"), "read")).toEqual(["from-the-first-run"]);
  });
});
