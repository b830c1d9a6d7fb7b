// Reading an archived log back through the API server's aggregation layer, beside the real node:
// the API server dials the controller's log API out of the node's network namespace (its cluster
// egress), through the relay test/harness/log-api.ts's logApiEndpoint puts there (log-api.suite.ts).
import { logApiSuite } from "../controller/log-api.suite.js";

logApiSuite();
