# Paddock build. Objects and binaries go under $(BUILD); source folders stay clean.
#   make                      build build/controld and build/nodeagent
#   make check                install/start what the tests need, run every test
#   make unit                 build and run only the unit tests (build/tests/unit/*): seconds,
#                             no services started
#   make SANITIZE=address,undefined check   the same tests, sanitized (in build/san)
#   make up / make down       local stack on the embedded default (sqlite + docker driver)
#   make up NOMAD_ADDR=http://127.0.0.1:4646 [NOMAD_TOKEN=...]   the same on the Nomad driver
#   make bench                benchmarks (ratios against a baseline run side by side)
#   make fuzz [FUZZ_SECONDS=600]   every libFuzzer target in tests/fuzz/ (default 60 s each);
#                             make check runs each for 5 s (build/tests/integration/test-fuzz)
#   make soak [SOAK_SECONDS=1800]  the soak: mixed work from many clients, then the leak table
#   make load [LOAD_SECONDS=600 LOAD_CLIENTS=200]   200 clients of exec and files (tests/soak/)
#   make install PREFIX=/usr DESTDIR=...

PREFIX  ?= /usr/local
DESTDIR ?=
CC      ?= cc
PKGS    := libmicrohttpd libcurl libcjson librabbitmq libnftnl libmnl sqlite3 libsystemd libssl libcrypto zlib

ifneq ($(SANITIZE),)
BUILD   ?= build/san
SANFLAGS := -fsanitize=$(SANITIZE) -fno-omit-frame-pointer -fno-sanitize-recover=all
else
BUILD   ?= build
SANFLAGS :=
endif

PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null)

WARN    := -Wall -Wextra -Werror -Wshadow -Wformat=2 -Wmissing-prototypes -Wswitch-enum \
           -Wno-format-nonliteral -Wno-format-truncation
CFLAGS  ?= -O2 -g
# Include paths per layer, so a controld file cannot pick up a nodeagent header by accident
# (nor common/ or proto-json/ one of a daemon's): each sees only itself and what lies below.
# Tests see everything.
# Inside controld the folders are layers (controld/README.md): edge/ over core/ over driver/ over
# guest/ (the client of paddock-init), store/ under all but guest/; the top (main, config, the
# shared services) sees every layer. A file sees its own layer and those below, so an include
# upward does not compile.
CTL_INC_STORE  := -Icontrold -Icontrold/store
CTL_INC_GUEST  := -Icontrold/guest
CTL_INC_DRIVER := -Icontrold -Icontrold/driver -Icontrold/guest -Icontrold/store
CTL_INC_CORE   := -Icontrold -Icontrold/core -Icontrold/driver -Icontrold/guest -Icontrold/store
CTL_INC_EDGE   := -Icontrold -Icontrold/edge -Icontrold/core -Icontrold/store
CTL_INC_ALL    := -Icontrold -Icontrold/edge -Icontrold/core -Icontrold/driver -Icontrold/guest -Icontrold/store
INC := -Icommon -Iproto-json $(CTL_INC_ALL) -Inodeagent -Itests/lib
$(BUILD)/obj/common/%.o: INC := -Icommon
$(BUILD)/obj/proto-json/%.o: INC := -Icommon -Iproto-json
$(BUILD)/obj/controld/%.o: INC := -Icommon -Iproto-json $(CTL_INC_ALL)
$(BUILD)/obj/controld/edge/%.o: INC := -Icommon -Iproto-json $(CTL_INC_EDGE)
$(BUILD)/obj/controld/core/%.o: INC := -Icommon -Iproto-json $(CTL_INC_CORE)
$(BUILD)/obj/controld/driver/%.o: INC := -Icommon -Iproto-json $(CTL_INC_DRIVER)
$(BUILD)/obj/controld/guest/%.o: INC := -Icommon -Iproto-json $(CTL_INC_GUEST)
$(BUILD)/obj/controld/store/%.o: INC := -Icommon -Iproto-json $(CTL_INC_STORE)
$(BUILD)/obj/nodeagent/%.o: INC := -Icommon -Iproto-json -Inodeagent
$(BUILD)/obj/nodeagent/paddock-init/%.o: INC := -Icommon -Iproto-json -Inodeagent/paddock-init
ALL_CFLAGS = -std=gnu17 $(WARN) $(CFLAGS) $(SANFLAGS) -D_GNU_SOURCE -pthread \
              $(INC) $(PKG_CFLAGS) -MMD -MP
LDLIBS  := $(PKG_LIBS) -pthread -lm
LDFLAGS += $(SANFLAGS)

COMMON_SRC   := $(wildcard common/*.c)
PJ_SRC       := $(wildcard proto-json/*.c)
CONTROLD_SRC := $(filter-out controld/main.c,$(wildcard controld/*.c controld/*/*.c))
AGENT_SRC    := $(filter-out nodeagent/main.c,$(wildcard nodeagent/*.c))
TESTLIB_SRC  := $(wildcard tests/lib/*.c)
UNIT_SRC     := $(wildcard tests/unit/test-*.c)
INTEG_SRC    := $(wildcard tests/integration/test-*.c)
FAKES_SRC    := $(wildcard tests/fakes/*.c)
BENCH_SRC    := $(wildcard tests/bench/*.c)
NOMAD_SRC    := $(wildcard tests/nomad/*.c)

obj = $(patsubst %.c,$(BUILD)/obj/%.o,$(1))

LIBCOMMON  := $(BUILD)/lib/libcommon.a
LIBPJ      := $(BUILD)/lib/libpj.a
LIBCTL     := $(BUILD)/lib/libcontrold.a
LIBAGENT   := $(BUILD)/lib/libnodeagent.a
LIBTEST    := $(BUILD)/lib/libtest.a

UNIT_BINS  := $(patsubst tests/unit/%.c,$(BUILD)/tests/unit/%,$(UNIT_SRC))
INTEG_BINS := $(patsubst tests/integration/%.c,$(BUILD)/tests/integration/%,$(INTEG_SRC))
FAKE_BINS  := $(patsubst tests/fakes/%.c,$(BUILD)/tests/fakes/%,$(FAKES_SRC))
BENCH_BINS := $(patsubst tests/bench/%.c,$(BUILD)/tests/bench/%,$(BENCH_SRC))

.PHONY: all check unit unit-bins tests bench up down install clean compdb deps fuzz fuzz-targets fuzz-link soak load
all: $(BUILD)/controld $(BUILD)/nodeagent $(BUILD)/paddock-init $(BUILD)/paddock-runsc-netns

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -c $< -o $@

$(LIBCOMMON): $(call obj,$(COMMON_SRC))
$(LIBPJ): $(call obj,$(PJ_SRC))
$(LIBCTL): $(call obj,$(CONTROLD_SRC))
$(LIBAGENT): $(call obj,$(AGENT_SRC))
$(LIBTEST): $(call obj,$(TESTLIB_SRC))
$(BUILD)/lib/%.a:
	@mkdir -p $(dir $@)
	rm -f $@
	ar rcs $@ $^

$(BUILD)/controld: $(call obj,controld/main.c) $(LIBCTL) $(LIBPJ) $(LIBCOMMON)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)
$(BUILD)/nodeagent: $(call obj,nodeagent/main.c) $(LIBAGENT) $(LIBPJ) $(LIBCOMMON)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# paddock-runsc-netns, the runtime path of runsc-net on gVisor hosts (nodeagent/runsc-netns/): one
# file, libc only.
$(BUILD)/paddock-runsc-netns: nodeagent/runsc-netns/runsc-netns.c
	@mkdir -p $(dir $@)
	$(CC) -std=gnu17 $(WARN) $(CFLAGS) -o $@ $<

# paddock-init, PID 1 of every sandbox (nodeagent/paddock-init/, proto-json/AGENT-PROTOCOL.md):
# a static binary of its own files, the agent codec, pj.c, err.c (struct err) and xalloc.c, nothing
# else (no pkg-config libraries). Static only in the plain build: the sanitizers need their
# shared runtime, so build/san has a dynamic, sanitized one for the same tests.
INIT_SRC    := $(wildcard nodeagent/paddock-init/*.c) proto-json/pj_agent.c proto-json/pj.c common/err.c common/xalloc.c
INIT_STATIC := $(if $(SANITIZE),,-static)
$(BUILD)/paddock-init: $(call obj,$(INIT_SRC))
	$(CC) $(LDFLAGS) $(INIT_STATIC) -o $@ $^
# The sanitized build's agent cannot run inside a sandbox (no sanitizer runtime there): it gets a
# plain static one beside it, paddock-init.static, which controld binds into sandboxes first.
ifneq ($(SANITIZE),)
INIT_STATIC_OBJ := $(patsubst %.c,$(BUILD)/obj-init-static/%.o,$(INIT_SRC))
$(BUILD)/obj-init-static/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) -std=gnu17 $(WARN) $(CFLAGS) -D_GNU_SOURCE -Icommon -Iproto-json -Inodeagent/paddock-init -c $< -o $@
$(BUILD)/paddock-init.static: $(INIT_STATIC_OBJ)
	$(CC) -static -o $@ $^
all: $(BUILD)/paddock-init.static
endif

TEST_LIBS := $(LIBTEST) $(LIBCTL) $(LIBAGENT) $(LIBPJ) $(LIBCOMMON)
$(BUILD)/tests/%: $(BUILD)/obj/tests/%.o $(TEST_LIBS)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $< $(TEST_LIBS) $(LDLIBS)

# Both drivers: these API suites run a second time on the Nomad driver (<suite>-nomad).
NOMAD_SUITES := test-controld test-runtime-exec test-runtime-stream test-runtime-files test-runtime-limits \
                test-controld-egress test-snapshots test-processes test-pool test-previews test-terminal test-e2b \
                test-lifecycle test-envd
NOMAD_VARIANTS := $(patsubst %,$(BUILD)/tests/integration/%-nomad,$(NOMAD_SUITES))
$(NOMAD_VARIANTS): $(BUILD)/tests/integration/%-nomad: tests/integration/nomad-variant.sh
	@mkdir -p $(dir $@)
	install -m 0755 $< $@

# The terminal page's xterm.js (MIT), from npm at build time: controld serves it from
# $(BUILD)/web (installed: /usr/share/paddock/web); no CDN at run time.
XTERM_PKGS := @xterm/xterm@5.5.0 @xterm/addon-fit@0.10.0
.PHONY: web
web: $(BUILD)/web/xterm.js
$(BUILD)/web/xterm.js:
	@mkdir -p $(BUILD)/npm-web $(BUILD)/web
	cd $(BUILD)/npm-web && npm install --no-audit --no-fund --no-save --prefix . $(XTERM_PKGS) >/dev/null
	cp $(BUILD)/npm-web/node_modules/@xterm/xterm/css/xterm.css $(BUILD)/npm-web/node_modules/@xterm/addon-fit/lib/addon-fit.js $(BUILD)/web/
	cp $(BUILD)/npm-web/node_modules/@xterm/xterm/lib/xterm.js $(BUILD)/web/xterm.js
tests: web $(BUILD)/npm-test/node_modules/puppeteer-core/package.json $(BUILD)/npm-test/terminal.mjs
$(BUILD)/npm-test/terminal.mjs: tests/browser/terminal.mjs
	@mkdir -p $(dir $@)
	cp $< $@
# The terminal's browser test drives headless Chromium (Debian's) with puppeteer-core (npm).
$(BUILD)/npm-test/node_modules/puppeteer-core/package.json:
	@mkdir -p $(BUILD)/npm-test
	cd $(BUILD)/npm-test && PUPPETEER_SKIP_DOWNLOAD=1 npm install --no-audit --no-fund --no-save --prefix . puppeteer-core@24.43.1 >/dev/null
# E2B's own SDK (npm `e2b`, pinned) for test-e2b, each version in a folder of its own beside the
# script: the oldest we support (E2B_SDK_OLD, create on /sandboxes) and the current one
# (E2B_SDK, create and connect on /v2/sandboxes). make bench's header says when npm has a newer.
E2B_SDK_OLD := e2b@2.45.0
E2B_SDK := e2b@2.51.0
tests: $(BUILD)/npm-e2b/node_modules/e2b/package.json $(BUILD)/npm-e2b/e2b-sdk.mjs
tests: $(BUILD)/npm-e2b-current/node_modules/e2b/package.json $(BUILD)/npm-e2b-current/e2b-sdk.mjs
$(BUILD)/npm-e2b/e2b-sdk.mjs $(BUILD)/npm-e2b-current/e2b-sdk.mjs: tests/e2b/sdk.mjs
	@mkdir -p $(dir $@)
	cp $< $@
# test-envd: the current SDK's filesystem calls (issue 38)
tests: $(BUILD)/npm-e2b-current/e2b-envd.mjs
$(BUILD)/npm-e2b-current/e2b-envd.mjs: tests/e2b/envd.mjs
	@mkdir -p $(dir $@)
	cp $< $@
# test-envd: E2B's volumes through the current SDK (issue 38)
tests: $(BUILD)/npm-e2b-current/e2b-volumes.mjs
$(BUILD)/npm-e2b-current/e2b-volumes.mjs: tests/e2b/volumes.mjs
	@mkdir -p $(dir $@)
	cp $< $@
# test-controld-egress: E2B's network rules with secrets, through the current SDK (issue 39)
tests: $(BUILD)/npm-e2b-current/e2b-egress.mjs
$(BUILD)/npm-e2b-current/e2b-egress.mjs: tests/e2b/egress.mjs
	@mkdir -p $(dir $@)
	cp $< $@
$(BUILD)/npm-e2b/node_modules/e2b/package.json:
	@mkdir -p $(BUILD)/npm-e2b
	cd $(BUILD)/npm-e2b && npm install --no-audit --no-fund --no-save --prefix . $(E2B_SDK_OLD) >/dev/null
$(BUILD)/npm-e2b-current/node_modules/e2b/package.json:
	@mkdir -p $(BUILD)/npm-e2b-current
	cd $(BUILD)/npm-e2b-current && npm install --no-audit --no-fund --no-save --prefix . $(E2B_SDK) >/dev/null
tests: $(NOMAD_VARIANTS)
tests: all $(UNIT_BINS) $(INTEG_BINS) $(FAKE_BINS) $(BENCH_BINS) $(BUILD)/tests/integration/test-fuzz $(BUILD)/tests/soak/soak \
	$(BUILD)/tests/nomad/nomad-standin

# The Nomad stand-in (tests/nomad/README.md): several files, so its own link rule.
$(BUILD)/tests/nomad/nomad-standin: $(call obj,$(NOMAD_SRC)) $(LIBCOMMON)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# ---- fuzzing: libFuzzer targets, built with clang into build/fuzz whatever BUILD is ----
FUZZ_SRC     := $(wildcard tests/fuzz/fuzz-*.c)
FUZZ_BUILD   := build/fuzz
FUZZ_CC      ?= clang
FUZZ_SAN     := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
FUZZ_SECONDS ?= 60

# The smoke run make check does: a script run-all.sh picks up like any test program.
$(BUILD)/tests/integration/test-fuzz: tests/fuzz/run.sh
	@mkdir -p $(dir $@)
	sed 's#@ROOT@#$(CURDIR)#' $< > $@ && chmod 0755 $@

# -Wno-unused-variable: clang counts cleanup-attribute guards (LOCKED, SANDBOX_LOCK_GUARD in
# controld, linked into fuzz-route) as unused; the gcc build keeps the warning as an error.
fuzz-targets:
	$(MAKE) BUILD=$(FUZZ_BUILD) SANITIZE= CC=$(FUZZ_CC) \
		CFLAGS="-O1 -g -fsanitize=fuzzer-no-link $(FUZZ_SAN) -Wno-unknown-warning-option -Wno-unused-variable" fuzz-link
fuzz-link: $(patsubst tests/fuzz/%.c,$(FUZZ_BUILD)/%,$(FUZZ_SRC))
$(FUZZ_BUILD)/fuzz-%: $(FUZZ_BUILD)/obj/tests/fuzz/fuzz-%.o $(FUZZ_BUILD)/lib/libpj.a $(FUZZ_BUILD)/lib/libcommon.a
	$(CC) -fsanitize=fuzzer $(FUZZ_SAN) -o $@ $^ $(LDLIBS)

# The route matcher and path unescaping, the preview and E2B request heads live in controld itself.
$(FUZZ_BUILD)/fuzz-route $(FUZZ_BUILD)/fuzz-preview-head $(FUZZ_BUILD)/fuzz-e2b-head: $(FUZZ_BUILD)/fuzz-%: $(FUZZ_BUILD)/obj/tests/fuzz/fuzz-%.o $(FUZZ_BUILD)/lib/libcontrold.a $(FUZZ_BUILD)/lib/libpj.a $(FUZZ_BUILD)/lib/libcommon.a
	$(CC) -fsanitize=fuzzer $(FUZZ_SAN) -o $@ $^ $(LDLIBS)

fuzz:
	tests/fuzz/run.sh $(FUZZ_SECONDS)

# ---- soak and load: not part of check (minutes, a platform of their own, real sandboxes) ----
SOAK_SECONDS ?= 1800
LOAD_SECONDS ?= 600
LOAD_CLIENTS ?= 200
soak: deps
	$(MAKE) tests
	PADDOCK_BUILD=$(BUILD) SOAK_SECONDS=$(SOAK_SECONDS) tests/soak/run.sh soak
load: deps
	$(MAKE) tests
	PADDOCK_BUILD=$(BUILD) LOAD_SECONDS=$(LOAD_SECONDS) LOAD_CLIENTS=$(LOAD_CLIENTS) tests/soak/run.sh load

# The README's test command. Installs and starts what the tests need, runs all, stops it.
# The unit tests also run built with ASan and UBSan (build/san): check runs both.
# The builds use every core (CI's 2 included) unless make was given -j itself.
CHECK_J := $(if $(findstring j,$(firstword $(MAKEFLAGS))),,-j$(shell nproc))
ifeq ($(SANITIZE),)
check: deps
	$(MAKE) $(CHECK_J) tests
	$(MAKE) $(CHECK_J) SANITIZE=address,undefined BUILD=build/san unit-bins
	PADDOCK_BUILD=$(BUILD) PADDOCK_SAN_BUILD=build/san tests/run-all.sh
else
check: deps
	$(MAKE) $(CHECK_J) tests
	PADDOCK_BUILD=$(BUILD) tests/run-all.sh
endif

unit-bins: $(UNIT_BINS)

# The unit tests alone: no deps, no services, same per-program result lines as check.
unit: $(UNIT_BINS)
	@rc=0; for t in $(UNIT_BINS); do echo "===== $$t ====="; PADDOCK_BUILD=$(BUILD) $$t </dev/null || rc=1; done; exit $$rc

bench: deps
	$(MAKE) tests
	PADDOCK_BUILD=$(BUILD) tests/bench/run.sh

deps:
	tests/env/services.sh install

up: deps
	$(MAKE) all web
	PADDOCK_BUILD=$(BUILD) tests/env/up.sh

down:
	PADDOCK_BUILD=$(BUILD) tests/env/down.sh

install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)/etc/paddock $(DESTDIR)/lib/systemd/system \
		$(DESTDIR)/usr/lib/sysusers.d $(DESTDIR)/usr/lib/tmpfiles.d $(DESTDIR)$(PREFIX)/share/paddock/systemd \
		$(DESTDIR)$(PREFIX)/share/paddock/cni $(DESTDIR)$(PREFIX)/share/paddock/nomad
	install -m 0755 $(BUILD)/controld $(BUILD)/nodeagent $(DESTDIR)$(PREFIX)/bin/
	install -d $(DESTDIR)$(PREFIX)/lib/paddock
	install -m 0755 $(BUILD)/paddock-init $(DESTDIR)$(PREFIX)/lib/paddock/paddock-init
	install -m 0755 $(BUILD)/paddock-runsc-netns $(DESTDIR)$(PREFIX)/lib/paddock/paddock-runsc-netns
	install -m 0644 packaging/controld.conf.example packaging/nodeagent.conf.example $(DESTDIR)/etc/paddock/
	for u in paddock-controld paddock-nodeagent; do \
		sed 's#/usr/bin/#$(PREFIX)/bin/#g' packaging/$$u.service > $(DESTDIR)/lib/systemd/system/$$u.service; done
	install -m 0644 packaging/sysusers-controld.conf $(DESTDIR)/usr/lib/sysusers.d/paddock-controld.conf
	install -m 0644 packaging/sysusers-nodeagent.conf $(DESTDIR)/usr/lib/sysusers.d/paddock-nodeagent.conf
	install -m 0644 packaging/tmpfiles-controld.conf $(DESTDIR)/usr/lib/tmpfiles.d/paddock-controld.conf
	install -m 0644 packaging/controld-docker-driver.conf packaging/nodeagent-relay.conf $(DESTDIR)$(PREFIX)/share/paddock/systemd/
	install -m 0644 packaging/cni/*.conflist $(DESTDIR)$(PREFIX)/share/paddock/cni/
	install -m 0644 packaging/nomad/*.hcl $(DESTDIR)$(PREFIX)/share/paddock/nomad/
	install -d $(DESTDIR)$(PREFIX)/share/paddock/images
	install -m 0755 packaging/images/start-dockerd packaging/images/start-e2b packaging/images/e2b-sudo \
		$(DESTDIR)$(PREFIX)/share/paddock/images/
	if [ -f packaging/daemon.json ]; then install -D -m 0644 packaging/daemon.json $(DESTDIR)$(PREFIX)/share/paddock/docker/daemon.json; fi
	if [ -f $(BUILD)/web/xterm.js ]; then install -d $(DESTDIR)$(PREFIX)/share/paddock/web && \
		install -m 0644 $(BUILD)/web/xterm.js $(BUILD)/web/xterm.css $(BUILD)/web/addon-fit.js $(DESTDIR)$(PREFIX)/share/paddock/web/; fi

# Debian packages paddock-controld and paddock-nodeagent in $(DEBDIR) (packaging/mkdeb.sh).
DEBDIR ?= $(BUILD)/deb
.PHONY: deb
deb: all
	packaging/mkdeb.sh $(BUILD) $(DEBDIR)

compdb:
	$(MAKE) clean && bear -- $(MAKE) tests

clean:
	rm -rf build

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
