// The dev cluster's controller (issue 57 item 5): with `npm run cluster:up -- --with-kueue` Kueue
// runs, and the controller started beside it watches Kueue's Workloads, so a run queued under a
// full ClusterQueue carries Kueue's words (docs/kueue.md) rather than "no Workload seen for it yet".
// The command line dev-cluster.ts starts the controller with is read by the controller's own
// flag parser and configuration.
import { Command } from "commander";
import { describe, expect, it } from "vitest";
import { registerControllerCommand } from "../../src/cli/controller-command.js";
import { loadControllerConfig } from "../../src/controller/config.js";
import { devArchiveSettings, devControllerArgs } from "../harness/dev-cluster.js";
import type { ObjectStore } from "../harness/object-store.js";

/** The controller's configuration from a command line, as `playbook controller` reads it. */
async function configFrom(args: string[]) {
  const program = new Command().exitOverride();
  registerControllerCommand(program);
  let flags: Record<string, unknown> | undefined;
  program.commands
    .find((c) => c.name() === "controller")
    ?.action((f: Record<string, unknown>) => {
      flags = f;
    });
  await program.parseAsync(args, { from: "user" });
  if (!flags) throw new Error("the controller command did not run");
  return loadControllerConfig(flags, {});
}

describe("the dev cluster's controller command line", () => {
  it.each([
    { name: "with Kueue running, the controller watches its Workloads", kueue: true },
    { name: "without Kueue, it does not", kueue: false },
  ])("$name", async ({ kueue }) => {
    const args = devControllerArgs({ cli: "/x/dist/bin/playbook.js", metricsPort: 43369, kueue });
    expect(args[0]).toBe("/x/dist/bin/playbook.js");
    const config = await configFrom(args.slice(1));
    expect(config.kueue).toBe(kueue);
    expect(config.metricsAddress).toBe("127.0.0.1:43369");
  });
});

describe("the dev cluster's controller with --with-object-store", () => {
  it("archives to the dev store: its bucket, endpoint and path-style, with the store's keys in the env only", async () => {
    const store = {
      endpoint: "http://127.0.0.1:40111",
      bucket: "playbook-logs",
      region: "us-east-1",
      accessKeyId: "AKDEV",
      secretAccessKey: "dev-secret",
    } as ObjectStore;
    const archive = devArchiveSettings(store);
    const args = [
      ...devControllerArgs({ cli: "/x/dist/bin/playbook.js", metricsPort: 1, kueue: false }),
      ...archive.args,
    ];
    const config = await configFrom(args.slice(1));
    expect(config.logArchiveBucket).toBe("playbook-logs");
    expect(config.logArchiveEndpoint).toBe("http://127.0.0.1:40111");
    expect(config.logArchiveForcePathStyle).toBe(true);
    expect(args.join(" ")).not.toContain("dev-secret");
    expect(archive.env).toEqual({ AWS_ACCESS_KEY_ID: "AKDEV", AWS_SECRET_ACCESS_KEY: "dev-secret" });
    expect(config.logArchivePodEndpoint).toBeUndefined();
  });

  it("signs the runner's uploads for the store's address on the real node when it has one", async () => {
    const store = { endpoint: "http://127.0.0.1:40111", bucket: "playbook-logs", region: "us-east-1" };
    const archive = devArchiveSettings(store as ObjectStore, "http://10.87.0.1:40111");
    const args = [
      ...devControllerArgs({ cli: "/x/dist/bin/playbook.js", metricsPort: 1, kueue: false }),
      ...archive.args,
    ];
    const config = await configFrom(args.slice(1));
    expect(config.logArchiveEndpoint).toBe("http://127.0.0.1:40111");
    expect(config.logArchivePodEndpoint).toBe("http://10.87.0.1:40111");
  });
});
