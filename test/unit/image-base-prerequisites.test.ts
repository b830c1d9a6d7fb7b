// Where image:build gets the Dockerfile's base: the official node:24-bookworm-slim pulled wherever
// a registry answers a quick probe, the local stand-in (debootstrap) only where none does.
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { BASE_IMAGE, baseRegistryUrl, decideBase, probeRegistry, pullMode } from "../harness/image.js";

const answers = { answers: true, detail: "https://registry-1.docker.io/v2/ answered HTTP 401 in 80 ms" };
const silent = { answers: false, detail: "https://registry-1.docker.io/v2/: ENOTFOUND" };

describe("deciding the base image", () => {
  it("pulls the official image where the registry answers, even over a stand-in made earlier", () => {
    expect(decideBase({ local: "none", pull: "auto", registry: answers })).toEqual({
      action: "pull",
      why: `the registry answers (${answers.detail}): pulling the official ${BASE_IMAGE}`,
    });
    expect(decideBase({ local: "stand-in", pull: "auto", registry: answers })).toEqual({
      action: "pull",
      why: `the registry answers (${answers.detail}): pulling the official ${BASE_IMAGE} in place of the local stand-in`,
    });
  });

  it("makes the stand-in only where no registry answers, and says why in one line", () => {
    const decision = decideBase({ local: "none", pull: "auto", registry: silent });
    expect(decision.action).toBe("stand-in");
    expect(decision.why).toMatch(
      new RegExp(`^no registry answers \\(${silent.detail}\\): making a stand-in for ${BASE_IMAGE} \\(`),
    );
    expect(decision.why).not.toContain("\n");
    expect(decideBase({ local: "stand-in", pull: "auto", registry: silent })).toEqual({
      action: "use-local",
      why: `no registry answers (${silent.detail}): using the stand-in for ${BASE_IMAGE} made earlier`,
    });
  });

  it("keeps the official image it has, and follows --pull and PLAYBOOK_IMAGE_PULL=0", () => {
    expect(decideBase({ local: "official", pull: "auto" }).action).toBe("use-local");
    expect(decideBase({ local: "official", pull: "always" }).action).toBe("pull");
    expect(decideBase({ local: "none", pull: "never" })).toMatchObject({
      action: "stand-in",
      why: expect.stringMatching(/^PLAYBOOK_IMAGE_PULL=0 declines pulling: making a stand-in/),
    });
    expect(pullMode(true, {})).toBe("always");
    expect(pullMode(false, { PLAYBOOK_IMAGE_PULL: "1" })).toBe("always");
    expect(pullMode(false, { PLAYBOOK_IMAGE_PULL: "0" })).toBe("never");
    expect(pullMode(false, {})).toBe("auto");
    expect(baseRegistryUrl({})).toBe("https://registry-1.docker.io/v2/");
    expect(baseRegistryUrl({ PLAYBOOK_BASE_REGISTRY: "mirror.example:5000" })).toBe(
      "https://mirror.example:5000/v2/",
    );
  });
});

describe("probing the registry", () => {
  let server: Server | undefined;
  afterEach(async () => {
    server?.closeAllConnections();
    await new Promise((resolve) => server?.close(resolve) ?? resolve(undefined));
    server = undefined;
  });

  async function listen(handler: Parameters<typeof createServer>[1]): Promise<string> {
    server = createServer(handler);
    await new Promise<void>((resolve) => server?.listen(0, "127.0.0.1", resolve));
    return `http://127.0.0.1:${(server.address() as AddressInfo).port}/v2/`;
  }

  it("counts any HTTP answer, such as a registry's 401 asking for a token", async () => {
    const url = await listen((_req, res) => {
      res.writeHead(401, { "www-authenticate": 'Bearer realm="x"' }).end();
    });
    const result = await probeRegistry(url, 2_000);
    expect(result.answers).toBe(true);
    expect(result.detail).toMatch(new RegExp(`^${url} answered HTTP 401 in \\d+ ms$`));
  });

  it("gives up at the timeout on a registry that never answers", async () => {
    const url = await listen(() => {});
    const started = Date.now();
    expect(await probeRegistry(url, 300)).toEqual({
      answers: false,
      detail: `${url}: no answer within 0.3 s`,
    });
    expect(Date.now() - started).toBeLessThan(2_000);
  });

  it("says at once when nothing listens", async () => {
    const url = await listen(() => {});
    server?.close();
    const result = await probeRegistry(url, 5_000);
    expect(result).toEqual({ answers: false, detail: `${url}: ECONNREFUSED` });
  });
});
