// /readyz says why the controller is not ready: `playbook controller` as a process reaches the
// real API server through a proxy that is cut (connections refused, as a stopped API server's
// are) and restored.
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createTestNamespace, deleteTestNamespace } from "../harness/cluster-test.js";
import { freePort } from "../harness/processes.js";
import { startFreezableProxy } from "./freezable-proxy.js";
import { clients, eventually, spawnControllerProcess } from "./support.js";

const { core, kubeConfig } = clients();
let namespace: string;
const scratch = mkdtempSync(path.join(tmpdir(), "pb-readiness-"));

beforeAll(async () => {
  namespace = await createTestNamespace(core, "pb-readiness");
});
afterAll(async () => {
  rmSync(scratch, { recursive: true, force: true });
  await deleteTestNamespace(core, namespace);
});

async function readyz(url: string): Promise<{ status: number; body: string } | undefined> {
  const response = await fetch(`${url}/readyz`).catch(() => undefined);
  if (!response) return undefined;
  return { status: response.status, body: (await response.text()).trim() };
}

describe("/readyz", () => {
  it("answers 503 naming the unreachable API server and the cache it left stale, then 200 once it is back", async () => {
    const proxy = await startFreezableProxy(kubeConfig);
    const kubeconfigFile = path.join(scratch, "kubeconfig");
    writeFileSync(kubeconfigFile, proxy.kubeConfig.exportConfig());
    const port = await freePort();
    const url = `http://127.0.0.1:${port}`;
    const { child, output } = spawnControllerProcess(
      ["--namespaces", namespace, "--leader-election=false", "--metrics-address", `127.0.0.1:${port}`],
      { KUBECONFIG: kubeconfigFile, PLAYBOOK_LOG_LEVEL: "info", PLAYBOOK_LOG_FORMAT: "json" },
    );
    try {
      await eventually("/readyz to answer 200", async () =>
        (await readyz(url))?.status === 200 ? true : undefined,
      );
      expect(await readyz(url)).toEqual({ status: 200, body: "ok" });

      await proxy.cut();
      const down = await eventually("/readyz to answer 503", async () => {
        const answer = await readyz(url);
        return answer?.status === 503 && /ECONNREFUSED/.test(answer.body) ? answer : undefined;
      });
      // Which cache, in which namespace, and the API server's error.
      expect(down.body).toMatch(
        new RegExp(
          `^not ready: (playbooks|pods) in ${namespace}: watch failed: API server unreachable: .*ECONNREFUSED`,
        ),
      );
      const notReady = await eventually("a log line saying why", async () =>
        output()
          .split("\n")
          .find((line) => line.includes('"msg":"Not ready"') && line.includes("ECONNREFUSED")),
      );
      expect(JSON.parse(notReady).reason).toMatch(/API server unreachable/);

      await proxy.restore();
      await eventually(
        "/readyz to answer 200 again",
        async () => ((await readyz(url))?.status === 200 ? true : undefined),
        60_000,
      );
      expect(await readyz(url)).toEqual({ status: 200, body: "ok" });
      const readinessLog = output()
        .split("\n")
        .filter((line) => line.startsWith("{"))
        .map((line) => (JSON.parse(line) as { msg: string }).msg)
        .filter((msg) => msg === "Ready" || msg === "Not ready");
      expect(readinessLog.at(-1)).toBe("Ready");
    } finally {
      child.kill("SIGKILL");
      await proxy.close();
    }
  });
});
