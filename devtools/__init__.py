"""Developer tooling (CPython only): the local web server, the web bundle and the browser
launcher, shared by the README's main command, the tests and the benchmarks."""
