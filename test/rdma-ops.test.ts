// Every RDMA operation end to end between two stacks joined by a pipe (the tests live in
// rdma-ops-helpers.ts so that test/memif-rdma.test.ts runs them over memif too).
import { rdmaOpsSuite } from './rdma-ops-helpers.ts';

rdmaOpsSuite('pipe').run();
