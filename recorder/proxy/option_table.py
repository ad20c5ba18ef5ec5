"""How an option table works: :class:`Option`, one option and every way to give it,
and :class:`OptionTable`, a class whose attributes are options and whose instances
hold their checked values. The recorder's table is
``recorder.proxy.options.AppConfig``.

An option is declared once, as one attribute of the table::

    stall_after = Option("30", "output silence that counts as a stall", parse_seconds)

and that line is the ``recorder proxy`` flag (``--stall-after``), its variable
(``RECORDER_STALL_AFTER``), the mitmproxy option (``recorder_stall_after``, which
``--set`` and ``~/.mitmproxy/config.yaml`` set), and the attribute of the checked
configuration (``config.stall_after``, of the type its check returns). A value is
read as text (or as the mitmproxy option's own type) and checked by the option's
check, whose error names where the value came from: the flag, the variable or the
mitmproxy option.

The ways in collect the values given (:data:`Given`): :meth:`OptionTable.from_args`
(each flag, else its variable; ``--set recorder_…=…`` as its flag) and
:meth:`OptionTable.from_mitmproxy` (under mitmproxy its options are the place: the
variables are not read). :meth:`OptionTable.resolve` checks every option, given or
not, into an instance. A flag wins over ``--set``, which wins over the variable,
which wins over the default.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Self, overload

from recorder.proxy.checks import OptionError

PREFIX = "recorder_"  # of the mitmproxy options the recorder declares

# option name -> (value as given, where it came from: the flag, the variable, the option)
Given = dict[str, tuple[Any, str]]


class Option[T]:
    """One option, and every way to give it (see the module's docstring).

    ``default`` is the value as mitmproxy holds it (text, a number or a switch;
    ``""`` for none), of the type of the mitmproxy option; ``check`` makes the
    option's value of any given one. ``name`` (the flag's, the variable's) is the
    attribute's by default. ``mitmproxy``: True for a ``recorder_…`` option the
    addon declares; the name of mitmproxy's own option when mitmproxy has this one
    (read and checked under mitmproxy too; ``recorder proxy --set NAME=…`` is then
    the flag); False for none. ``runtime``: under mitmproxy it may change while the
    proxy runs (any other change is refused). ``repeat``: the flag may be given
    several times. ``note``: a line to say once when a value was read as something
    else than written. ``doc`` and ``shown``: the option's row in the README (its
    description, the help by default; its default, when the default's text is not
    how to say it).
    """

    def __init__(
        self,
        default: str | int | bool,
        help: str,
        check: Callable[[Any, str], T],
        *,
        name: str = "",
        metavar: str | None = None,
        mitmproxy: bool | str = True,
        runtime: bool = False,
        repeat: bool = False,
        note: Callable[[Any, T], str | None] | None = None,
        doc: str = "",
        shown: str | None = None,
    ) -> None:
        self.default = default
        self.kind: type = type(default)  # the mitmproxy option's: str, int or bool
        self.help = help
        self.check = check
        self.name = name  # set from the attribute's name when empty
        self.attr = ""  # the attribute's name, set when the table is made
        self.metavar = metavar
        self.choices: tuple[str, ...] | None = getattr(check, "choices", None)
        self.mitmproxy = mitmproxy
        self.runtime = runtime
        self.repeat = repeat
        self.note = note
        self.doc = doc or help
        self.shown = shown

    def __set_name__(self, owner: type, attr: str) -> None:
        self.attr = attr
        self.name = self.name or attr.replace("_", "-")

    def __repr__(self) -> str:
        return f"Option({self.name!r})"

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> Option[T]: ...
    @overload
    def __get__(self, obj: object, owner: type | None = None) -> T: ...
    def __get__(self, obj: object | None, owner: type | None = None) -> Option[T] | T:
        if obj is None:
            return self
        values = vars(obj)
        if self.attr not in values:  # not given: the default, checked
            values[self.attr] = self.check(self.default, self.flag)
        value: T = values[self.attr]
        return value

    def __set__(self, obj: object, value: T) -> None:
        vars(obj)[self.attr] = value

    @property
    def flag(self) -> str:
        """The ``recorder proxy`` flag."""
        return "--" + self.name

    @property
    def dest(self) -> str:
        """The argparse attribute of the flag."""
        return self.name.replace("-", "_")

    @property
    def env(self) -> str:
        """The environment variable of ``recorder proxy``."""
        return "RECORDER_" + self.name.upper().replace("-", "_")

    @property
    def declared(self) -> str | None:
        """The ``recorder_…`` mitmproxy option the addon declares, if any."""
        return PREFIX + self.dest if self.mitmproxy is True else None

    @property
    def mitm(self) -> str | None:
        """The option's name under mitmproxy: the declared one, or mitmproxy's own."""
        if isinstance(self.mitmproxy, str):
            return self.mitmproxy
        return self.declared

    def where(self, under: str) -> str:
        """How a message names the option when it was not given: its flag, or under
        mitmproxy its mitmproxy option (``--mode`` for mitmproxy's own)."""
        if under == "mitmproxy" and isinstance(self.mitmproxy, str):
            return "--" + self.mitmproxy.replace("_", "-")
        return (self.declared if under == "mitmproxy" else None) or self.flag


def parse_sets(specs: Sequence[str] | None) -> list[tuple[str, str]]:
    """``--set NAME=VALUE`` as (name, value) pairs, checked for their form only
    (mitmproxy checks its own names and values: ``recorder.proxy.runner.check_sets``)."""
    pairs = []
    for spec in specs or ():
        name, sep, value = spec.partition("=")
        if not name.strip():
            raise OptionError(f"--set {spec!r}: NAME=VALUE expected")
        pairs.append((name.strip(), value if sep else "true"))
    return pairs


class OptionTable:
    """A table of options (its :class:`Option` attributes) and, as an instance,
    their checked values: a value not given is the default, checked. ``origin``
    says where each value came from, ``notes`` what to say once at start."""

    # `--set NAME` of `recorder proxy` that is no option any more: what to use instead
    set_hints: ClassVar[dict[str, str]] = {}
    # the table's options in the order declared (a subclass's after its base's), by
    # name, and by their names under mitmproxy: made with the class
    table: ClassVar[tuple[Option[Any], ...]] = ()
    by_name: ClassVar[dict[str, Option[Any]]] = {}
    by_mitm: ClassVar[dict[str, Option[Any]]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        found: dict[str, Option[Any]] = {}
        for klass in reversed(cls.__mro__):
            for attr, value in vars(klass).items():
                if isinstance(value, Option):
                    found[attr] = value
        cls.table = tuple(found.values())
        cls.by_name = {opt.name: opt for opt in cls.table}
        cls.by_mitm = {opt.mitm: opt for opt in cls.table if opt.mitm}

    def __init__(self, **values: Any) -> None:
        for attr, value in values.items():
            if not isinstance(getattr(type(self), attr, None), Option):
                raise TypeError(f"{type(self).__name__} has no option {attr!r}")
            setattr(self, attr, value)
        self.origin: dict[str, str] = {}
        self.notes: list[str] = []

    @classmethod
    def options(cls) -> tuple[Option[Any], ...]:
        """Every option of the table, in the order declared."""
        return cls.table

    @classmethod
    def option(cls, name: str) -> Option[Any]:
        """The option named ``name`` (``stall-after``)."""
        return cls.by_name[name]

    def where(self, name: str) -> str:
        """How option ``name`` was given, for a message: ``--db``, ``RECORDER_DB``, …"""
        return self.origin.get(name) or self.option(name).flag

    def check(self) -> None:
        """The checks across options, once each has its value (raise OptionError)."""

    @classmethod
    def resolve(cls, given: Given, *, under: str = "proxy") -> Self:
        """Check every option (the given ones, else the defaults) into an instance.

        ``under`` is ``"proxy"`` (names in messages are flags) or ``"mitmproxy"``
        (they are mitmproxy options). Raises OptionError naming the flag, the
        variable or the mitmproxy option the bad value came from.
        """
        config = cls()
        for opt in cls.options():
            raw, what = given.get(opt.name, (opt.default, opt.where(under)))
            config.origin[opt.name] = what
            if raw == "" and opt.kind is str:
                raw = opt.default  # an empty text is unset: the default applies
            value = opt.check(raw, what)
            setattr(config, opt.attr, value)
            line = opt.note(raw, value) if opt.note is not None and opt.name in given else None
            if line:
                config.notes.append(f"{what} {raw}: {line}")
        config.check()
        return config

    # -- recorder proxy: flags, variables, --set -----------------------------------

    @classmethod
    def add_flags(cls, parser: Any) -> None:
        """The ``recorder proxy`` flags, one per option (defaults are None: unset, so
        that the variable or the default applies), and ``--set``."""
        for opt in cls.options():
            if opt.kind is bool:
                parser.add_argument(
                    opt.flag, action="store_true", default=None, dest=opt.dest, help=opt.help
                )
            elif opt.repeat:
                parser.add_argument(
                    opt.flag, action="append", dest=opt.dest, metavar=opt.metavar, help=opt.help
                )
            else:
                parser.add_argument(
                    opt.flag, dest=opt.dest, metavar=opt.metavar, choices=opt.choices, help=opt.help
                )
        parser.add_argument(
            "--set",
            action="append",
            metavar="NAME=VALUE",
            dest="mitm_set",
            help="any mitmproxy option, repeatable: ssl_insecure=true,"
            " ssl_verify_upstream_trusted_ca=ca.pem, upstream_cert=false, client_certs=DIR, …"
            " (`mitmdump --options` lists them); a recorder_… option, or mode, is the same"
            " as its flag",
        )

    @classmethod
    def from_args(cls, args: Any, environ: Mapping[str, str] | None = None) -> Given:
        """The values ``recorder proxy`` was given: each flag, else its ``--set``,
        else its variable."""
        env = os.environ if environ is None else environ
        given: Given = {}
        for opt in cls.options():
            value = getattr(args, opt.dest, None)
            if value is not None and value != []:
                given[opt.name] = (value, opt.flag)
                continue
            raw = env.get(opt.env)
            if raw not in (None, ""):
                given[opt.name] = (raw, opt.env)
        for name, value in parse_sets(getattr(args, "mitm_set", None)):
            ours = cls.by_mitm.get(name)
            if ours is None:
                if name.startswith(PREFIX):
                    known = sorted(o.declared for o in cls.options() if o.declared)
                    hint = cls.set_hints.get(name, "known: " + ", ".join(known))
                    raise OptionError(f"--set {name}: no such recorder option ({hint})")
                continue  # mitmproxy's own: checked by mitmproxy
            if getattr(args, ours.dest, None) not in (None, []):
                continue  # the flag wins
            where = f"--set {name}"
            before, came = given.get(ours.name, ("", ""))
            if ours.repeat and came == where:  # `--set mode=A --set mode=B`: both
                value = f"{before} {value}"
            given[ours.name] = (value, where)
        return given

    @classmethod
    def mitmproxy_sets(cls, specs: Sequence[str] | None) -> list[str]:
        """The ``--set`` specs that are mitmproxy's alone (not the recorder's), as given."""
        ours = cls.by_mitm
        return [
            f"{name}={value}"
            for name, value in parse_sets(specs)
            if not name.startswith(PREFIX) and name not in ours
        ]

    # -- under mitmproxy ---------------------------------------------------------------

    @classmethod
    def mitmproxy_names(cls) -> frozenset[str]:
        """The mitmproxy options the recorder reads."""
        return frozenset(cls.by_mitm)

    @classmethod
    def add_mitmproxy_options(cls, loader: Any) -> None:
        """Declare every ``recorder_…`` option to mitmproxy (an addon's ``load``)."""
        for opt in cls.options():
            if opt.declared is not None:
                choices = list(opt.choices or ()) or None
                loader.add_option(opt.declared, opt.kind, opt.default, opt.help, choices)

    @classmethod
    def from_mitmproxy(cls, options: Any) -> Given:
        """The values of the mitmproxy options the recorder reads."""
        return {
            opt.name: (getattr(options, name), opt.where("mitmproxy"))
            for name, opt in cls.by_mitm.items()
            if name in options
        }
