import { execFile } from "node:child_process";
import path from "node:path";
import { promisify } from "node:util";
import { ApiException, VersionApi } from "@kubernetes/client-node";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { z } from "zod";
import { clusterClients, createTestNamespace, deleteTestNamespace } from "../harness/cluster-test.js";

const run = promisify(execFile);
const { kubeConfig, core } = clusterClients();

describe("the control plane", () => {
  it("reports Kubernetes v1.36 from /version and through kubectl", async () => {
    const version = await kubeConfig.makeApiClient(VersionApi).getCode();
    expect(version.gitVersion).toMatch(/^v1\.36\.\d+$/);
    expect(version.major).toBe("1");
    expect(version.minor).toBe("36");

    const { stdout } = await run(path.join(inject("binDir"), "kubectl"), ["version", "--output=json"], {
      env: { ...process.env, KUBECONFIG: inject("kubeconfig") },
    });
    const reported = JSON.parse(stdout) as { serverVersion: { gitVersion: string } };
    expect(reported.serverVersion.gitVersion).toBe(version.gitVersion);
  });

  describe("in a namespace enforcing the restricted Pod Security level", () => {
    let namespace: string;
    beforeAll(async () => {
      namespace = await createTestNamespace(core, "restricted", {
        "pod-security.kubernetes.io/enforce": "restricted",
      });
    });
    afterAll(() => deleteTestNamespace(core, namespace));

    it("rejects a privileged pod", async () => {
      const created = core.createNamespacedPod({
        namespace,
        body: {
          metadata: { name: "privileged" },
          spec: {
            containers: [
              { name: "main", image: "busybox", command: ["true"], securityContext: { privileged: true } },
            ],
          },
        },
      });
      const error = await created.then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(error).toBeInstanceOf(ApiException);
      const { code, body } = error as ApiException<string>;
      expect(code).toBe(403);
      const status = z.object({ reason: z.string(), message: z.string() }).parse(JSON.parse(body));
      expect(status.reason).toBe("Forbidden");
      expect(status.message).toContain('violates PodSecurity "restricted:latest": privileged');
    });
  });
});
