#!/usr/bin/env bash
# Every reference in the docs and in code comments names something that exists:
#  - a path-like word ending in .rs/.py/.js/.sh/.md, or starting with tests/, crates/, src/,
#    bench/, docs/, scripts/, fuzz/ or examples/, in README.md, docs/ (not docs/journal/, whose
#    entries keep the history as it was) and in the comments of *.rs, *.py, *.js, *.sh, must be
#    a file or folder that git tracks (or ignores: bench/results/, fuzz/corpus/); `machines/x.rs`
#    is read as crates/machines/src/x.rs, and a bare file name must exist somewhere;
#  - a backticked test-like name (three underscores or more) in README.md and docs/ must occur
#    in the code;
#  - every relative markdown link in README.md and docs/ (journal included) resolves, and so
#    does its #anchor.
# Prints file:line: reference for each stale one and fails if there is any.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
exec python3 - "$@" <<'PY'
import os, re, subprocess, sys

files = [f for f in subprocess.check_output(['git', 'ls-files'], text=True).split('\n') if f]
fileset = set(files)
dirs = {f.rsplit('/', i)[0] for f in files for i in range(1, f.count('/') + 1)}
basenames = {os.path.basename(f) for f in files}
# Files of other projects that the text names on purpose (the driver suites' own tests and
# modules).
OUTSIDE = {'tests/test_auth.py', 'unittests.py', 'network.py', '.js'}
OUTSIDE_NAMES = {'caching_sha2_password_private_key_path', 'max_transaction_idle_time',
                 'test_connection_attributes_defaults', 'test_connection_attributes_user_defined',
                 'test_unbuffered_load_file', 'test_set_compress_true'}

def tracked(p):
    p = os.path.normpath(p.rstrip('/'))
    return p in fileset or p in dirs

def ignored(p):
    return subprocess.run(['git', 'check-ignore', '-q', '--no-index', p]).returncode == 0

def anywhere(p):
    p = p.rstrip('/')
    if tracked(p):
        return True
    head, _, rest = p.partition('/')
    if rest and tracked(f'crates/{head}/src/{rest}'):
        return True
    return any(f.endswith('/' + p) for f in files) or any(d.endswith('/' + p) for d in dirs)

ROOTS = ('tests/', 'crates/', 'src/', 'bench/', 'docs/', 'scripts/', 'fuzz/', 'examples/')
TOKEN = re.compile(r'(?<![\w./-])((?:\.\.?/)*[A-Za-z0-9_.\-]+(?:/[A-Za-z0-9_.\-*{},<>]+)*/?)')
problems = []

def check_path(src, ln, tok, base):
    t = tok.rstrip('.,:;)')
    if '://' in t or any(c in t for c in '{*<…') or '...' in t or t in OUTSIDE:
        return
    rooted = t.startswith(ROOTS)
    if not (rooted or re.search(r'\.(rs|py|js|sh|md)$', t)):
        return
    if rooted or t.startswith('.'):
        ok = tracked(t) or tracked(os.path.join(base, t)) or ignored(t)
    elif '/' in t:
        ok = anywhere(t) or tracked(os.path.join(base, t))
    else:
        ok = t in basenames
    if not ok:
        problems.append(f'{src}:{ln}: {t}')

def slug(heading):
    h = re.sub(r'\[([^\]]*)\]\([^)]*\)', r'\1', heading.strip().lower())
    h = re.sub(r'[^\w\- ]', '', h)
    return h.replace(' ', '-')

anchor_cache = {}
def anchors(path):
    if path not in anchor_cache:
        found, seen, fence = set(), {}, False
        for line in open(path, encoding='utf-8'):
            if line.startswith('```'):
                fence = not fence
            m = None if fence else re.match(r'#{1,6}\s+(.*?)\s*#*\s*$', line)
            if m:
                s = slug(m.group(1))
                n = seen.get(s, 0)
                seen[s] = n + 1
                found.add(s if n == 0 else f'{s}-{n}')
            found.update(re.findall(r'<a (?:name|id)="([^"]+)"', line))
        anchor_cache[path] = found
    return anchor_cache[path]

LINK = re.compile(r'\]\(([^)\s]+)(?:\s+"[^"]*")?\)')
docs = ['README.md'] + [f for f in files if f.startswith('docs/') and f.endswith('.md')]
names_cited = {}
for md in docs:
    base, journal = os.path.dirname(md), md.startswith('docs/journal/')
    fence = False
    for ln, line in enumerate(open(md, encoding='utf-8'), 1):
        for m in LINK.finditer(line):
            target = m.group(1)
            if re.match(r'[a-z]+:', target):
                continue
            path, _, frag = target.partition('#')
            dest = os.path.normpath(os.path.join(base, path)) if path else md
            if path and not tracked(dest):
                problems.append(f'{md}:{ln}: link {target}')
            elif frag and dest.endswith('.md') and frag not in anchors(dest):
                problems.append(f'{md}:{ln}: anchor {target}')
        if journal:
            continue
        for m in TOKEN.finditer(LINK.sub(']', line)):
            check_path(md, ln, m.group(1), base)
        for code in re.findall(r'`([^`]+)`', line):
            for name in re.findall(r'(?<![\w/.])[a-z][a-z0-9]*(?:_[a-z0-9]+){3,}(?![\w/.])', code):
                if not name.startswith('ringgate_') and name not in OUTSIDE_NAMES:
                    names_cited.setdefault(name, f'{md}:{ln}')

for f in files:
    if (not re.search(r'\.(rs|py|js|sh)$', f) or f.startswith('fuzz/seeds/')
            or f == 'scripts/check-doc-refs.sh'):
        continue
    mark = '#' if f.endswith(('.py', '.sh')) else '//'
    try:
        lines = open(f, encoding='utf-8').read().split('\n')
    except (UnicodeDecodeError, FileNotFoundError):
        continue
    for ln, line in enumerate(lines, 1):
        k = line.find(mark)
        if k < 0 or (mark == '//' and line[max(0, k - 1):k] == ':'):
            continue
        for m in TOKEN.finditer(line[k + len(mark):]):
            check_path(f, ln, m.group(1), os.path.dirname(f))

if names_cited:
    code = subprocess.run(['git', 'grep', '-ohwE', '|'.join(sorted(names_cited)), '--',
                           '*.rs', '*.py', '*.js', '*.sh', 'Makefile', '*.toml'],
                          capture_output=True, text=True).stdout.split()
    for name in sorted(set(names_cited) - set(code)):
        problems.append(f'{names_cited[name]}: test or name {name}')

for p in problems:
    print(p)
sys.exit(1 if problems else 0)
PY
