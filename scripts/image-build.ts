// `npm run image:build [-- --archive FILE] [--pull]`: builds the Dockerfile as
// playbook-controller:<version> (PLAYBOOK_IMAGE_TAG gives another tag) with podman (configured
// under the project's cache folder) or docker, whichever answers; the base is pulled where the registry answers a quick probe, else a
// stand-in is made locally (--pull or PLAYBOOK_IMAGE_PULL=1 always pulls, PLAYBOOK_IMAGE_PULL=0 never).
import { parseArgs } from "node:util";
import { containerEngine } from "../test/harness/container-engine.js";
import { buildImage, imageSize, pullMode } from "../test/harness/image.js";
import {
  ensurePrerequisites,
  IMAGE_PREREQUISITES,
  installForbiddenByEnv,
} from "../test/harness/prerequisites.js";

const log = (message: string): void => {
  process.stderr.write(`image:build: ${message}\n`);
};

try {
  // podman, runc, CNI plugins, debootstrap: installed as root with apt-get, else one line saying how.
  ensurePrerequisites({
    install: !installForbiddenByEnv(),
    log,
    prerequisites: IMAGE_PREREQUISITES,
    why: "image:build builds the project's image with podman (runc, CNI plugins) and, where no registry answers, makes the base's stand-in with debootstrap",
  });
  const { values } = parseArgs({
    options: { archive: { type: "string" }, pull: { type: "boolean", default: false } },
  });
  const started = Date.now();
  const engine = containerEngine();
  const name = await buildImage(engine, {
    log,
    pull: pullMode(values.pull),
    ...(values.archive ? { archive: values.archive } : {}),
  });
  const size = await imageSize(engine, name);
  log(`Built ${name} in ${((Date.now() - started) / 1000).toFixed(1)} s, ${(size / 1e6).toFixed(1)} MB`);
  process.stdout.write(`${name}\n`);
} catch (error) {
  log(`failed: ${error instanceof Error ? error.message : String(error)}`);
  process.exitCode = 1;
}
