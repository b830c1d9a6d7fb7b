// What `playbook controller` runs once its flags are read: the controller with its logger, and
// the signals that stop it. The command imports this module when it runs, and with it client-node,
// pino and prom-client: no other command loads them (in the bundle, they are controller.js).
import { pino } from "pino";
import type { ControllerConfig } from "../controller/config.js";
import { LeaseLostError, PlaybookController } from "../controller/controller.js";
import { loadKubeConfig, makeClients } from "../runtime/kube-config.js";
import { textDestination } from "../runtime/log-format.js";

export async function startController(config: ControllerConfig): Promise<void> {
  const log =
    config.logFormat === "text"
      ? // Every line is the controller's; a component field would only repeat that.
        pino({ level: config.logLevel, base: null }, textDestination(process.stdout))
      : pino({ level: config.logLevel, base: { component: "playbook-controller" } });
  const controller = new PlaybookController({ config, clients: makeClients(loadKubeConfig()), log });
  let signals = 0;
  const onSignal = (signal: NodeJS.Signals) => {
    signals++;
    if (signals > 1) {
      log.warn({ signal }, "Second signal, exiting at once");
      process.exit(130);
    }
    log.info({ signal }, "Stopping: finishing in-flight reconciles and releasing the Lease");
    controller.stop();
  };
  process.on("SIGTERM", onSignal);
  process.on("SIGINT", onSignal);
  try {
    await controller.run();
  } catch (error) {
    if (!(error instanceof LeaseLostError)) throw error;
    // As client-go's controllers do: end, so the restart rejoins as a standby. Exiting here
    // rather than returning: a call that never answers (an exec credential plugin) would keep
    // the process alive, neither leading nor able to lead again.
    process.stderr.write(
      `playbook controller: ${error.message} (not renewed within --renew-deadline ${config.renewDeadline}ms); exiting\n`,
    );
    process.exit(1);
  }
}
