// The cluster a command talks to, found as kubectl finds it, and the API's failures in words
// with their exit codes (the cluster tests see the same against a real API server).
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { stringify } from "yaml";
import { type Cluster, ClusterError, connect, describeApiFailure } from "../../src/cli/cluster/connection.js";
import { ApiError } from "../../src/runtime/api-client.js";

function kubeconfigFile(
  contexts: { name: string; namespace?: string }[],
  current?: string,
  server = "https://one:6443",
) {
  const file = path.join(mkdtempSync(path.join(tmpdir(), "cli-connection-")), "config");
  writeFileSync(
    file,
    stringify({
      apiVersion: "v1",
      kind: "Config",
      clusters: [{ name: `c-${server}`, cluster: { server } }],
      users: [{ name: "u", user: { token: "t" } }],
      contexts: contexts.map((context) => ({
        name: context.name,
        context: {
          cluster: `c-${server}`,
          user: "u",
          ...(context.namespace ? { namespace: context.namespace } : {}),
        },
      })),
      ...(current ? { "current-context": current } : {}),
    }),
  );
  return file;
}

let saved: string | undefined;
beforeEach(() => {
  saved = process.env.KUBECONFIG;
});
afterEach(() => {
  if (saved === undefined) delete process.env.KUBECONFIG;
  else process.env.KUBECONFIG = saved;
});

describe("connect", () => {
  it("takes the context's namespace, -n over it, and default without either", () => {
    const file = kubeconfigFile([{ name: "dev", namespace: "ops" }, { name: "bare" }], "dev");
    expect(connect({ kubeconfig: file })).toMatchObject({
      namespace: "ops",
      context: "dev",
      server: "https://one:6443",
    });
    expect(connect({ kubeconfig: file, namespace: "other" }).namespace).toBe("other");
    expect(connect({ kubeconfig: file, context: "bare" }).namespace).toBe("default");
  });

  it("merges KUBECONFIG's files as kubectl does: the first current-context wins, missing files are skipped", () => {
    const first = kubeconfigFile([{ name: "dev", namespace: "ops" }], "dev");
    const second = kubeconfigFile([{ name: "prod", namespace: "live" }], "prod", "https://two:6443");
    process.env.KUBECONFIG = [first, "/nonexistent/config", second].join(path.delimiter);
    expect(connect({})).toMatchObject({ context: "dev", namespace: "ops" });
    expect(connect({ context: "prod" })).toMatchObject({
      context: "prod",
      namespace: "live",
      server: "https://two:6443",
    });
  });

  it("in a pod with no kubeconfig, uses its service account as kubectl does", () => {
    const home = process.env.HOME;
    delete process.env.KUBECONFIG;
    process.env.HOME = mkdtempSync(path.join(tmpdir(), "cli-connection-home-"));
    process.env.KUBERNETES_SERVICE_HOST = "10.96.0.1";
    process.env.KUBERNETES_SERVICE_PORT = "443";
    try {
      const cluster = connect({ namespace: "ci" });
      expect(cluster).toMatchObject({ server: "https://10.96.0.1:443", namespace: "ci" });
      expect(cluster.context).toBe("in-cluster (the pod's service account)");
      delete process.env.KUBERNETES_SERVICE_HOST;
      expect(() => connect({})).toThrow(
        /^no kubeconfig: .*\.kube\/config does not exist and KUBECONFIG is not set/,
      );
    } finally {
      process.env.HOME = home;
      delete process.env.KUBERNETES_SERVICE_HOST;
      delete process.env.KUBERNETES_SERVICE_PORT;
    }
  });

  it("refuses what leads nowhere with exit code 2, naming it", () => {
    const file = kubeconfigFile([{ name: "dev" }]);
    const failure = (flags: Parameters<typeof connect>[0]) => {
      try {
        connect(flags);
      } catch (error) {
        expect(error).toBeInstanceOf(ClusterError);
        expect((error as ClusterError).exitCode).toBe(2);
        return (error as Error).message;
      }
      throw new Error("connected");
    };
    expect(failure({ kubeconfig: file })).toBe(
      `kubeconfig --kubeconfig ${file}: no current-context (pass --context NAME)`,
    );
    expect(failure({ kubeconfig: file, context: "prod" })).toBe(
      `--context prod: no such context in kubeconfig --kubeconfig ${file} (it has dev)`,
    );
    expect(failure({ kubeconfig: "/nonexistent/config" })).toBe(
      "--kubeconfig /nonexistent/config: no such file (/nonexistent/config)",
    );
  });
});

describe("describeApiFailure", () => {
  const file = kubeconfigFile([{ name: "dev", namespace: "ops" }], "dev");
  let cluster: Cluster;
  beforeEach(() => {
    cluster = connect({ kubeconfig: file });
  });
  const what = { verb: "get", resource: "playbooks", name: "nightly" };

  it("tells a missing Playbook from a missing CRD by the Status the API server sends", () => {
    const missing = describeApiFailure(
      new ApiError(
        404,
        { kind: "Status", reason: "NotFound", details: { name: "nightly" }, message: "not found" },
        "",
      ),
      what,
      cluster,
    );
    expect(missing.message).toBe(
      "get playbooks.playbook.dev nightly in namespace ops: not found (context dev, server https://one:6443)",
    );
    expect(missing.exitCode).toBe(2);
    const noCrd = describeApiFailure(new ApiError(404, "404 page not found\n", ""), what, cluster);
    expect(noCrd.message).toBe(
      "get playbooks.playbook.dev nightly in namespace ops: the API server has no resource playbooks.playbook.dev: is the Playbook CRD installed? (context dev, server https://one:6443)\n  the API server said: 404 page not found",
    );
    expect(noCrd.exitCode).toBe(2);
  });

  it("gives 3 for a server that cannot be reached or fails, 2 for a refusal", () => {
    const refused = Object.assign(new Error("connect ECONNREFUSED 10.0.0.1:6443"), { code: "ECONNREFUSED" });
    expect(describeApiFailure(refused, what, cluster)).toMatchObject({
      exitCode: 3,
      message:
        "get playbooks.playbook.dev nightly in namespace ops: cannot reach the API server (context dev, server https://one:6443)\n  connect ECONNREFUSED 10.0.0.1:6443",
    });
    expect(
      describeApiFailure(new ApiError(503, { message: "etcd is down" }, ""), what, cluster).exitCode,
    ).toBe(3);
    expect(describeApiFailure(new ApiError(403, { message: "no" }, ""), what, cluster).exitCode).toBe(2);
    expect(describeApiFailure(new ApiError(422, { message: "invalid" }, ""), what, cluster).exitCode).toBe(2);
  });
});
