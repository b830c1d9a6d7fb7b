// `playbook run` has no cluster to place a pod in: a Playbook with placement fields runs on this
// machine all the same, and the command says once which fields it ignored.
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { expect, it } from "vitest";
import { startCli } from "../support/cli.js";

it("runs a Playbook with placement fields locally, saying once that they are ignored", async () => {
  const file = join(mkdtempSync(join(tmpdir(), "pb-place-")), "placed.yaml");
  writeFileSync(
    file,
    `apiVersion: playbook.dev/v1alpha1
kind: Playbook
metadata: {name: placed}
spec:
  nodeSelector: {pool: batch}
  tolerations: [{key: dedicated, operator: Exists, effect: NoSchedule}]
  podMetadata: {annotations: {sidecar.istio.io/inject: "false"}}
  tasks:
    - {name: a, run: echo ran-a}
    - {name: b, run: echo ran-b}
`,
  );
  const result = await startCli(["run", "-f", file]);
  expect(result.code).toBe(0);
  expect(result.stdout).toContain("ran-a");
  expect(result.stdout).toContain("ran-b");
  const notes = result.stderr.split("\n").filter((line) => line.includes("ignored"));
  expect(notes).toEqual([
    "playbook: spec.nodeSelector, spec.tolerations, spec.podMetadata ignored: they place a cluster's pod, and this run is on this machine",
  ]);
});
