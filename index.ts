/**
 * rdma-graph for embedding applications:
 *
 *   import { createDataplane, loadConfig } from 'rdma-graph';
 *   const dp = await createDataplane(loadConfig());   // the embedded default, or loadConfig(FILE)
 *
 * The data plane's contract, DataplaneApi, is the whole programmatic surface (the REST API and
 * rdmactl use nothing else): createDataplane picks the implementation (one graph on this thread,
 * or cpu.workers threads); startApi serves it over HTTP, ApiClient talks to a running daemon.
 */
export { createDataplane } from './dataplane/create.ts';
export { Dataplane } from './dataplane/dataplane.ts';
export type * from './dataplane/api.ts';
export { VERSION } from './dataplane/views.ts';
export { DataplaneError } from './dataplane/views.ts';
export type * from './dataplane/dataplane.ts';
export { parseConfig, loadConfig, STARTUP_CONFIG, ConfigError, type ConfigIssue } from './config/load.ts';
export type { Config, InterfaceConfig, DriverKind } from './config/types.ts';
export { startApi, buildServer } from './api/server.ts';
export { ApiClient, ApiError, ApiConnectionError } from './api/client.ts';
