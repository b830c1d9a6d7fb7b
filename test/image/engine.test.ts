// The container engine as the project configures it: podman reads the project's files under its
// state folder, never /etc's, and the service the tests use answers on a socket there.
import { readFileSync } from "node:fs";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { containerEngine, engineRun, podmanStateDir } from "../harness/container-engine.js";
import "./support.js";

describe("the container engine", () => {
  const engine = containerEngine();

  it("keeps podman's storage under the project's state folder and runs containers with runc", async () => {
    if (engine.kind === "docker") {
      // Docker is configured by its daemon, not by the project: it need only answer.
      expect((await engineRun(engine, ["version", "--format", "{{.Server.Version}}"])).trim()).not.toBe("");
      return;
    }
    const info = JSON.parse(await engineRun(engine, ["info", "--format", "json"])) as {
      store: { graphRoot: string; runRoot: string; configFile: string };
      host: { ociRuntime: { name: string } };
    };
    const state = podmanStateDir();
    expect(info.store.graphRoot).toBe(path.join(state, "storage"));
    expect(info.store.runRoot).toBe(path.join(state, "run"));
    expect(info.store.configFile).toBe(path.join(state, "storage.conf"));
    expect(info.host.ociRuntime.name).toBe("runc");
    expect(engine.env.CONTAINERS_CONF).toBe(path.join(state, "containers.conf"));
    expect(readFileSync(path.join(state, "containers.conf"), "utf8")).not.toContain("@STATE_DIR@");
  });

  it("serves testcontainers on a local socket with Ryuk off and mapped ports on 127.0.0.1", () => {
    expect(process.env.DOCKER_HOST).toMatch(/^unix:\/\//);
    if (engine.kind === "podman")
      expect(process.env.DOCKER_HOST).toContain(path.join(podmanStateDir(), "sockets"));
    expect(process.env.TESTCONTAINERS_RYUK_DISABLED).toBe("true");
    expect(process.env.TESTCONTAINERS_HOST_OVERRIDE).toBe("127.0.0.1");
  });
});
