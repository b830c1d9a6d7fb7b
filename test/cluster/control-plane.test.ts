import { execFile } from "node:child_process";
import path from "node:path";
import { promisify } from "node:util";
import {
  ApiException,
  AuthorizationV1Api,
  RbacAuthorizationV1Api,
  VersionApi,
} from "@kubernetes/client-node";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { z } from "zod";
import { clusterClients, createTestNamespace, deleteTestNamespace } from "../harness/cluster-test.js";
import { waitFor } from "../harness/processes.js";

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

  it("authorizes with RBAC: a service account may list pods only once a RoleBinding allows it", async () => {
    const namespace = await createTestNamespace(core, "rbac");
    try {
      const rbac = kubeConfig.makeApiClient(RbacAuthorizationV1Api);
      const authorization = kubeConfig.makeApiClient(AuthorizationV1Api);
      const canListPods = async () => {
        const review = await authorization.createSubjectAccessReview({
          body: {
            spec: {
              user: `system:serviceaccount:${namespace}:default`,
              groups: [
                "system:serviceaccounts",
                `system:serviceaccounts:${namespace}`,
                "system:authenticated",
              ],
              resourceAttributes: { namespace, verb: "list", resource: "pods" },
            },
          },
        });
        return review.status?.allowed ?? false;
      };
      expect(await canListPods()).toBe(false);

      await rbac.createNamespacedRole({
        namespace,
        body: {
          metadata: { name: "pod-reader" },
          rules: [{ apiGroups: [""], resources: ["pods"], verbs: ["get", "list", "watch"] }],
        },
      });
      await rbac.createNamespacedRoleBinding({
        namespace,
        body: {
          metadata: { name: "default-reads-pods" },
          roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "Role", name: "pod-reader" },
          subjects: [{ kind: "ServiceAccount", name: "default", namespace }],
        },
      });
      await waitFor(
        "the RoleBinding to take effect",
        async () => ((await canListPods()) ? true : undefined),
        {
          timeoutMs: 10_000,
        },
      );
    } finally {
      await deleteTestNamespace(core, namespace);
    }
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
