import { execFile } from "node:child_process";
import { existsSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { z } from "zod";

const run = promisify(execFile);

/** The checkout's root, found from this file in both test/harness and dist/test/harness. */
export function repoRoot(): string {
  let dir = path.dirname(fileURLToPath(import.meta.url));
  while (!existsSync(path.join(dir, "package.json"))) {
    const parent = path.dirname(dir);
    if (parent === dir) throw new Error("package.json not found above the harness");
    dir = parent;
  }
  return dir;
}

/**
 * The binaries tools/build.sh builds, by what runs them: `control-plane` (etcd, kube-apiserver,
 * kube-controller-manager, kube-scheduler, kubectl, helm), `real-node` (kubelet, kube-proxy,
 * containerd and its shim, ctr, and Kueue's manager, whose tests run on the real node), `all` both.
 */
export type ToolsSet = "control-plane" | "real-node" | "all";

/**
 * Runs tools/build.sh for the set the caller needs, which builds any of its binaries that is
 * missing (progress on stderr, passed through) and prints the cache folder; a set whose binaries
 * are there returns at once, whatever builds the other set meanwhile. Fails with the script's
 * message when Go or a build is missing.
 */
export async function toolsBinDir(set: ToolsSet): Promise<string> {
  const script = path.join(repoRoot(), "tools", "build.sh");
  try {
    const child = run("bash", [script], {
      maxBuffer: 1 << 20,
      env: { ...process.env, PLAYBOOK_TOOLS_SET: set },
    });
    child.child.stderr?.pipe(process.stderr);
    const { stdout } = await child;
    return z.string().min(1).parse(stdout.trim());
  } catch (error) {
    throw new Error(
      "Kubernetes binaries are missing and could not be built by tools/build.sh (see its message above); " +
        "the cluster tests need Go >= 1.26 and access to the Go module proxy",
      { cause: error },
    );
  }
}
