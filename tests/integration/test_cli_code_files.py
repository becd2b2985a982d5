"""Code files given to `kgym eval`, `kgym submit` and `kgym redteam` are read
without trusting them (src/common/code_file.c, kg_read_code_file): anything that is not
a regular file is refused without being read (a FIFO would block forever,
/dev/zero grow without end), the size is checked against the field's
limit before reading, and an empty file, a NUL byte (a C-string reader
would cut the text there and go on) or bytes that are not strict UTF-8 are
refused with the byte offset. Every refusal is exit status 2, before an
engine starts or a server is asked (submit is pointed at a port nothing
listens on). Fast:
one real evaluation (the non-ASCII case), the rest refusals."""
from __future__ import annotations

import os
import socket
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KGYM = os.environ.get("KGYM_BIN", os.path.join(ROOT, "build", "kgym"))
REF = os.path.join(ROOT, "problems", "cpu", "level1", "1_GELU.py")
SOL = os.path.join(ROOT, "problems", "cpu", "level1", "solutions", "1_GELU.triton.py")
FAST = ["--num-perf-trials", "1", "--num-correct-trials", "1", "--num-warmup", "0",
        "--enable-profiling", "false"]
KERNEL_LIMIT = 256 * 1024     # KG_MAX_KERNEL_CODE
REFERENCE_LIMIT = 512 * 1024  # KG_MAX_REFERENCE_CODE
CODE = b"import torch\nx = 1\n"


def free_port() -> int:
    """A loopback port nothing listens on (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


SERVER = f"http://127.0.0.1:{free_port()}"


def kgym(cmd: str, *args: str, timeout: float = 20) -> subprocess.CompletedProcess:
    e = dict(os.environ)
    e.setdefault("TMPDIR", "/tmp")  # must be enterable by the candidate's uid
    extra = ["--server", SERVER] if cmd == "submit" else []
    return subprocess.run([KGYM, cmd, *extra, *args], capture_output=True, text=True,
                          env=e, timeout=timeout)


def code_args(flag: str, path: str) -> list[str]:
    """--ref/--cand with path in the one and a good file in the other."""
    return ["--ref", path, "--cand", SOL] if flag == "--ref" else ["--ref", REF, "--cand", path]


def refused(p: subprocess.CompletedProcess, cmd: str, path: str, *words: str) -> None:
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert f"kgym {cmd}: " in p.stderr and f"{path}: " in p.stderr, p.stderr
    for w in words:
        assert w in p.stderr, (w, p.stderr)
    assert "connect" not in p.stderr.lower()  # submit: refused before the server


def write(path, data: bytes) -> str:
    with open(path, "wb") as f:
        f.write(data)
    return str(path)


@pytest.fixture
def fifo(tmp_path):
    path = str(tmp_path / "fifo.py")
    os.mkfifo(path)
    return path


@pytest.fixture
def unix_socket(tmp_path):
    path = str(tmp_path / "sock.py")
    s = socket.socket(socket.AF_UNIX)
    s.bind(path)
    yield path
    s.close()


CMDS = ["eval", "submit"]
MAX_CANDS = {"eval": 4096, "submit": 1024}  # MAX_CANDS of cmd_eval.c, cmd_client.c
FLAGS = ["--cand", "--ref"]


@pytest.mark.parametrize("cmd", CMDS)
@pytest.mark.parametrize("flag", FLAGS)
def test_dev_zero_is_refused_unread(cmd, flag):
    p = kgym(cmd, *code_args(flag, "/dev/zero"))
    refused(p, cmd, "/dev/zero", flag, "a character device, not a regular file")


@pytest.mark.parametrize("cmd", CMDS)
@pytest.mark.parametrize("flag", FLAGS)
def test_fifo_is_refused_without_blocking(cmd, flag, fifo):
    p = kgym(cmd, *code_args(flag, fifo))
    refused(p, cmd, fifo, "a FIFO (named pipe), not a regular file")


@pytest.mark.parametrize("cmd", CMDS)
def test_socket_is_refused(cmd, unix_socket):
    p = kgym(cmd, *code_args("--cand", unix_socket))
    refused(p, cmd, unix_socket, "a socket, not a regular file")


@pytest.mark.parametrize("cmd", CMDS)
def test_directory_as_ref_is_refused(cmd, tmp_path):
    p = kgym(cmd, *code_args("--ref", str(tmp_path)))
    refused(p, cmd, str(tmp_path), "a directory, not a regular file")


@pytest.mark.parametrize("cmd", CMDS)
def test_fifo_inside_a_cand_directory_is_refused(cmd, tmp_path):
    os.mkfifo(tmp_path / "a_fifo.py")
    write(tmp_path / "b_good.py", CODE)
    p = kgym(cmd, "--ref", REF, "--cand", str(tmp_path))
    refused(p, cmd, str(tmp_path / "a_fifo.py"), "a FIFO")


@pytest.mark.parametrize("cmd", CMDS)
def test_a_cand_directory_without_python_files_is_refused(cmd, tmp_path):
    write(tmp_path / "notes.txt", b"no code here")
    p = kgym(cmd, "--ref", REF, "--cand", str(tmp_path))
    assert p.returncode != 0 and f"--cand {tmp_path}: no .py files" in p.stderr, p.stderr


@pytest.mark.parametrize("cmd", CMDS)
def test_a_cand_directory_over_the_candidate_cap_is_refused(cmd, tmp_path):
    for i in range(MAX_CANDS[cmd] + 1):
        write(tmp_path / f"c{i:04d}.py", CODE)
    p = kgym(cmd, "--ref", REF, "--cand", str(tmp_path))
    assert p.returncode != 0, p.stderr
    assert f"more than {MAX_CANDS[cmd]} .py files" in p.stderr, p.stderr


@pytest.mark.parametrize("cmd", CMDS)
@pytest.mark.parametrize("flag,field,limit", [("--cand", "kernel_code", KERNEL_LIMIT),
                                              ("--ref", "reference_code", REFERENCE_LIMIT)])
def test_huge_sparse_file_is_refused_by_its_size(cmd, flag, field, limit, tmp_path):
    """Valid code, then a 2 GiB hole of NUL bytes: the old reader read all of
    it and cut the text at the first NUL, so the code went on as if fine."""
    path = write(tmp_path / "big.py", CODE)
    os.truncate(path, 2 << 30)
    p = kgym(cmd, *code_args(flag, path), timeout=10)
    refused(p, cmd, path, f"{2 << 30} bytes, over the {field} limit of {limit} bytes")


@pytest.mark.parametrize("cmd", CMDS)
@pytest.mark.parametrize("flag,field,limit", [("--cand", "kernel_code", KERNEL_LIMIT),
                                              ("--ref", "reference_code", REFERENCE_LIMIT)])
def test_one_byte_over_the_limit_is_refused(cmd, flag, field, limit, tmp_path):
    path = write(tmp_path / "over.py", b"#" * limit + b"\n")
    p = kgym(cmd, *code_args(flag, path))
    refused(p, cmd, path, f"{limit + 1} bytes, over the {field} limit")


@pytest.mark.skipif(not os.access("/proc/kallsyms", os.R_OK), reason="no /proc/kallsyms")
def test_file_longer_than_its_size_says_is_cut_at_the_limit():
    """/proc files say size 0; the reader reads at most limit + 1 bytes."""
    with open("/proc/kallsyms", "rb") as f:
        if len(f.read(KERNEL_LIMIT + 1)) <= KERNEL_LIMIT:
            pytest.skip("/proc/kallsyms is small here")
    p = kgym("eval", *code_args("--cand", "/proc/kallsyms"))
    refused(p, "eval", "/proc/kallsyms", "over the kernel_code limit", "when read")


@pytest.mark.parametrize("cmd", CMDS)
@pytest.mark.parametrize("flag", FLAGS)
def test_nul_byte_after_valid_code_is_refused(cmd, flag, tmp_path):
    path = write(tmp_path / "nul.py", CODE + b"\0y = 2\n")
    p = kgym(cmd, *code_args(flag, path))
    refused(p, cmd, path, f"a NUL byte at byte offset {len(CODE)}")


# (bytes after CODE, what the message says); the offset is Python's
BAD_UTF8 = [
    (b"# caf\xe9\n", "cut short"),                           # Latin-1 é
    (b"# \xc3\xa9\xe2\x82\xac \xff\n", "never occurs"),      # after good é and €
    (b"x = '\xc0\xaf'\n", "overlong"),                       # 2-byte overlong '/'
    (b"x = '\xe0\x80\xaf'\n", "overlong"),                   # 3-byte overlong
    (b"x = '\xf0\x80\x80\xaf'\n", "overlong"),               # 4-byte overlong
    (b"# \xed\xa0\x80\n", "surrogate"),                      # U+D800
    (b"# \xed\xbf\xbf\n", "surrogate"),                      # U+DFFF
    (b"# \xf4\x90\x80\x80\n", "above U+10FFFF"),             # U+110000
    (b"# \xf5\x80\x80\x80\n", "above U+10FFFF"),
    (b"# \x80\n", "continuation byte without a lead byte"),
    (b"# \xe2\x82\n", "cut short"),                          # € missing its last byte
    (b"# \xe2\x82", "cut off by the end of the file"),
]


@pytest.mark.parametrize("cmd", CMDS)
@pytest.mark.parametrize("flag", FLAGS)
@pytest.mark.parametrize("bad,why", BAD_UTF8, ids=[repr(b) for b, _ in BAD_UTF8])
def test_invalid_utf8_is_refused_with_its_offset(cmd, flag, bad, why, tmp_path):
    data = CODE + bad
    with pytest.raises(UnicodeDecodeError) as e:
        data.decode("utf-8")
    path = write(tmp_path / "bad.py", data)
    p = kgym(cmd, *code_args(flag, path))
    refused(p, cmd, path, f"not valid UTF-8 at byte offset {e.value.start} "
                          f"(0x{data[e.value.start]:02x}: ", why)


@pytest.mark.parametrize("cmd", CMDS)
@pytest.mark.parametrize("flag", FLAGS)
def test_empty_file_is_refused(cmd, flag, tmp_path):
    path = write(tmp_path / "empty.py", b"")
    p = kgym(cmd, *code_args(flag, path))
    refused(p, cmd, path, "empty file")


def test_redteam_refuses_a_fifo_and_a_problem_with_a_nul(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    os.mkfifo(corpus / "a.py")
    p = kgym("redteam", "--dir", str(corpus))
    refused(p, "redteam", str(corpus / "a.py"), "a FIFO")
    os.unlink(corpus / "a.py")
    prob = write(tmp_path / "prob.py", CODE + b"\0")
    write(corpus / "b.py", f"# redteam: family=x problem={prob} backend=cpu "
                           f"expect=pass\n".encode() + CODE)
    p = kgym("redteam", "--dir", str(corpus), "--backend", "cpu")
    refused(p, "redteam", prob, f"a NUL byte at byte offset {len(CODE)}")


SECRET = b"TOPSECRET 7f3a root-only line\nroot:$6$salt$hash:19000:0:99999:7:::\n"


def secret_link(tmp_path, name: str = "link.py") -> tuple[str, str]:
    """A root-only file (as /etc/shadow is) and a .py symbolic link to it."""
    target = write(tmp_path / "secret.txt", SECRET)
    os.chmod(target, 0o600)
    link = str(tmp_path / name)
    os.symlink(target, link)
    return target, link


def never_echoed(p: subprocess.CompletedProcess) -> None:
    assert "TOPSECRET" not in p.stdout + p.stderr and "$6$" not in p.stdout + p.stderr


@pytest.mark.parametrize("cmd", CMDS)
@pytest.mark.parametrize("flag", FLAGS)
def test_a_symlink_is_refused_and_its_target_never_echoed(cmd, flag, tmp_path):
    _, link = secret_link(tmp_path)
    p = kgym(cmd, *code_args(flag, link), "--json", timeout=120)
    refused(p, cmd, link, "a symbolic link, not a regular file")
    never_echoed(p)


@pytest.mark.parametrize("cmd", CMDS)
def test_a_symlink_inside_a_cand_directory_is_refused(cmd, tmp_path):
    d = tmp_path / "cands"
    d.mkdir()
    write(d / "a_good.py", CODE)
    _, link = secret_link(tmp_path, "cands/b_link.py")
    p = kgym(cmd, "--ref", REF, "--cand", str(d), "--json", timeout=120)
    refused(p, cmd, link, "a symbolic link")
    never_echoed(p)


def test_redteam_refuses_a_symlinked_case(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    _, link = secret_link(tmp_path, "corpus/a.py")
    p = kgym("redteam", "--dir", str(corpus), "--backend", "cpu", timeout=120)
    refused(p, "redteam", link, "a symbolic link")
    never_echoed(p)


def non_ascii_copy(src: str, dst) -> str:
    with open(src, "rb") as f:
        body = f.read()
    return write(dst, "# ünïcödé — “quotes” ✓ 𝔘 (U+1D518)\n".encode() + body)


def test_eval_takes_non_ascii_utf8(tmp_path):
    ref = non_ascii_copy(REF, tmp_path / "ref.py")
    cand = non_ascii_copy(SOL, tmp_path / "cand.py")
    p = kgym("eval", "--ref", ref, "--cand", cand, "--backend", "triton", "--json", *FAST,
             timeout=300)
    assert p.returncode == 0, p.stderr
    assert '"verdict":"pass"' in p.stdout, p.stdout


def test_submit_takes_non_ascii_utf8_and_a_file_at_the_limit(tmp_path):
    """Accepted files get as far as the server (none here: exit 1)."""
    ref = non_ascii_copy(REF, tmp_path / "ref.py")
    cand = non_ascii_copy(SOL, tmp_path / "cand.py")
    full = write(tmp_path / "full.py", CODE + b"#" * (KERNEL_LIMIT - len(CODE) - 1) + b"\n")
    for c in (cand, full):
        p = kgym("submit", "--ref", ref, "--cand", c)
        assert p.returncode == 1, p.stderr
        assert SERVER in p.stderr, p.stderr
