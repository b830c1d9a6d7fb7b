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
 * Runs tools/build.sh, which builds any missing binary (progress on stderr, passed through) and
 * prints the cache folder. Fails with the script's message when Go or a build is missing.
 */
export async function toolsBinDir(): Promise<string> {
  const script = path.join(repoRoot(), "tools", "build.sh");
  try {
    const child = run("bash", [script], { maxBuffer: 1 << 20 });
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
