// `npm run image:base [-- --force]`: makes the local stand-in for node:24-bookworm-slim (Debian
// bookworm minbase from debootstrap + the Node binary of npm's `node` package), for machines
// where the official image cannot be pulled. `image:build` does this by itself when the base is missing.
import { parseArgs } from "node:util";
import { containerEngine, engineRun, imageExists } from "../test/harness/container-engine.js";
import { BASE_IMAGE, imageSize, makeBaseStandIn } from "../test/harness/image.js";
import {
  ensurePrerequisites,
  IMAGE_PREREQUISITES,
  installForbiddenByEnv,
} from "../test/harness/prerequisites.js";

const log = (message: string): void => {
  process.stderr.write(`image:base: ${message}\n`);
};

try {
  // podman, runc, CNI plugins, debootstrap: installed as root with apt-get, else one line saying how.
  ensurePrerequisites({
    install: !installForbiddenByEnv(),
    log,
    prerequisites: IMAGE_PREREQUISITES,
    why: "image:base makes the base's stand-in with debootstrap and imports it into podman (runc, CNI plugins)",
  });
  const { values } = parseArgs({ options: { force: { type: "boolean", default: false } } });
  const engine = containerEngine();
  if ((await imageExists(engine, BASE_IMAGE)) && !values.force) {
    log(`${BASE_IMAGE} is already in local storage (--force makes the stand-in again)`);
  } else {
    const started = Date.now();
    if (values.force) await engineRun(engine, ["rmi", "--force", BASE_IMAGE]).catch(() => "");
    log(`making a stand-in for ${BASE_IMAGE} (no registry is used)`);
    await makeBaseStandIn(engine, log);
    const size = await imageSize(engine, BASE_IMAGE);
    log(
      `Made ${BASE_IMAGE} in ${((Date.now() - started) / 1000).toFixed(1)} s, ${(size / 1e6).toFixed(1)} MB`,
    );
  }
} catch (error) {
  log(`failed: ${error instanceof Error ? error.message : String(error)}`);
  process.exitCode = 1;
}
