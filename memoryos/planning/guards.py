"""Checks on what a language model proposes for long-term memory, before the planner turns it into ops.

A weak or misbehaving model writes nonsense as readily as facts: "The user is a puppy who likes shoes", a
fact that is just "Maya", a profile that invents "Age: 25, has a partner, two children" or forgets most of
what it held. Long-term memory outlives the conversation, so a bad reply stored there misleads every later
answer. The checks are cheap and lexical (no second model call): what a proposal asserts must be made of
words the source turns (or the previous profile) hold. They run in the planner, so `MemorySpace.apply`
stays deterministic; a refused proposal leaves the previous state, is logged at INFO with ids and counts
only (memory text only at DEBUG), and is counted per rule in `REFUSALS`.

Grounding compares crude stems (`stem`): "hiking" and "hike", "likes" and "like" meet; a paraphrase that
shares no word with the turns does not, which is why the thresholds ask for a share of the words, not all.
Words are split by script. Scripts that space their words (Latin, Cyrillic, Greek, Hangul...) give words;
Chinese and Japanese do not, so a run of Han and kana would be one word, and a Chinese fact one word never
found in its turns. Such a run gives character bigrams instead, after its stopwords and
hiragana (particles and endings) are cut out: "用户和狗去爬山" is 狗去, 去爬, 爬山, all found in
"我昨天带我的狗去爬山了", while single characters would be found by chance in any long conversation.
"""

import functools
import logging
import re
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from memoryos.config import MemoryConfig
from memoryos.llm.endpoint import llm_endpoint_configured
from memoryos.types import Page
from memoryos.validation import TIMESTAMP_FORMAT

log = logging.getLogger(__name__)

Rule = Literal["fact_not_sentence", "fact_ungrounded", "profile_dropped", "profile_unsupported"]
"""The names refusals are logged and counted under."""

SliceOutcome = Literal["analysis_deferred", "analysis_given_up"]
"""What became of a slice with a refusal, counted beside the rules: left for a later pass to analyse
again, or marked analyzed once `guard_analysis_attempts` analyses of it were refused."""

_HAN = "\u3005\u3007\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0003134f"
_HIRAGANA = "\u3041-\u309f"
_KATAKANA = "\u30a1-\u30fa\u30fc-\u30ff\u31f0-\u31ff\uff66-\uff9f"
_UNSPACED = _HAN + _HIRAGANA + _KATAKANA
_RUN = re.compile(f"[{_UNSPACED}]+")
"""A run of Chinese or Japanese text: a clause, not a word."""
_WORD = re.compile(f"(?:(?![{_UNSPACED}])[^\\W_])+")
"""A word of a script that spaces its words."""
_TOKEN = re.compile(f"{_RUN.pattern}|{_WORD.pattern}")
_KANA = re.compile(f"[{_HIRAGANA}{_KATAKANA}]")
_HANGUL = re.compile("[\uac00-\ud7a3]")
_ATTRIBUTE_SPLIT = re.compile(r"[\n;,、，；。]|\.(?:\s|$)")
_SUFFIXES = ("ingly", "edly", "ings", "ists", "ing", "ies", "ied", "ers", "ist", "er", "ed", "es", "ly", "s")
CHARACTERS_PER_WORD = 1.5
"""Chinese words average about one and a half characters, so a run of Han and kana counts this many
characters a word towards `fact_min_words`: "用户养狗" (4) is a sentence, "爬山" (2) a fragment."""


def _word_set(words: str) -> frozenset[str]:
    return frozenset(words.split())


_HANGUL_SUFFIXES = tuple(
    sorted(
        _word_set(
            """했어요 합니다 에게서 에서는 이라는 에게 에서 으로 까지 부터 처럼 보다 했다 한다 하고 해요 하는 이다
            라는 은 는 이 가 을 를 에 와 과 도 의 로 만 랑"""
        ),
        key=len,
        reverse=True,
    )
)
"""Korean particles and endings glued to a word ("개와", "개를": dog), cut as English suffixes are,
longest first."""

STOPWORDS = _word_set(
    """a about above after again against all also am an and any are as at be because been before being
    below between both but by can could did do does doing down during each else ever few for from further
    had has have having he her here hers herself him himself his how i if in into is it its itself just
    like likely me more most my myself no nor not now of off on once only or other our ours ourselves out
    over own same she should so some such than that the their theirs them themselves then there these
    they this those through to too under until up very was we were what when where which while who whom
    why will with would you your yours yourself yourselves one ones thing things lot lots really well
    user users assistant assistants speaker person people someone something currently recently
    用户 助手 使用者 的 了 和 与 及 是 在 有 也 都 就 而 或 被 把 对 于 将 从 向 给 很 这 那 个 一 些 只
    我 你 他 她 它 们 您 吗 呢 吧 啊 着 过 地 得 之 其 并 又 还 为 以 等 会 要 能
    ユーザー アシスタント 私 彼 彼女 僕 俺
    사용자 어시스턴트 그 그녀 그들 나 저 우리 당신 너"""
)
"""Words that carry no content of their own. "like" is here as the preposition it mostly is in facts
("activities like hiking"); "user" and "assistant" are every fact's subject, so matching them proves
nothing about the turns. Chinese and Japanese entries cut the runs they occur in, as hiragana (particles
and endings) do; Korean ones match a word's stem."""

PROFILE_LABELS = _word_set(
    """name age gender occupation job work profession location lives live home hobby hobbies interest
    interests personality trait traits preference preferences habit habits goal goals communication style
    identity background family relationship relationships status values value note notes
    姓名 名字 年龄 性别 职业 工作 地点 住址 居住地 爱好 兴趣 性格 特点 偏好 喜好 习惯 目标 沟通风格 沟通 风格
    身份 背景 家庭 家人 人际关系 关系 状态 价值观 备注 生活中的人
    名前 年齢 性別 職業 仕事 場所 住所 趣味 興味 性格 好み 習慣 目標 コミュニケーションスタイル 身元 背景
    家族 人間関係 関係 メモ
    이름 나이 성별 직업 직장 위치 거주지 취미 관심사 성격 선호 습관 목표 가족 관계 배경"""
)
"""Headings a profile line may start with ("Hobbies: painting"): formatting, not an attribute's content."""

_PROFILE_IGNORED = STOPWORDS | PROFILE_LABELS

PRONOUN_SUBJECTS = _word_set(
    """he she they it i we you his her their its my our your him them
    그 그녀 그들 나 내 저 제 우리 당신 너 네"""
)
"""A fact opening with one of these names nobody once stored alone: the prompt asks to resolve pronouns,
and the 1.5B model often did not ("He is interested in yoga"). Korean ones are stems ("그는": he)."""

PRONOUN_PREFIXES = ("他", "她", "它", "我", "你", "您", "彼", "私", "僕", "俺", "あなた")
"""The same for a fact opening with a run of Chinese or Japanese ("他们", "彼女は"), which no space ends."""


def stem(word: str) -> str:
    """A crude stem: a common suffix, then a final "e", removed while three letters stay; for a Korean
    word, a particle or ending while a syllable stays. Enough to match inflections across a paraphrase
    ("hiking"/"hike", "shoes"/"shoe", "개와"/"개를"); never meant to be linguistics."""
    word = word.casefold()
    if _HANGUL.search(word):
        return next(
            (word[: -len(s)] for s in _HANGUL_SUFFIXES if word.endswith(s) and len(word) > len(s)), word
        )
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            word = word[: -len(suffix)]
            break
    return word[:-1] if word.endswith("e") and len(word) > 3 else word


def content_stems(text: str, ignore: frozenset[str] = STOPWORDS) -> set[str]:
    """The stems of the words of `text` that are not in `ignore` (numbers included: an age is content),
    and the character bigrams of its Chinese and Japanese runs once `ignore` and hiragana are cut out (a
    character left alone counts as itself)."""
    stems = {stem(word) for word in _WORD.findall(text) if not _among(word, ignore)}
    for run in _RUN.findall(text):
        for piece in _cutter(ignore, japanese=_KANA.search(run) is not None).split(run):
            stems |= _bigrams(piece) if len(piece) > 1 else set(piece)
    return stems


def word_count(text: str) -> int:
    """Words of spaced scripts, and Chinese and Japanese characters at `CHARACTERS_PER_WORD` a word."""
    characters = sum(len(run) for run in _RUN.findall(text))
    return len(_WORD.findall(text)) + int(characters / CHARACTERS_PER_WORD + 0.5)


def _opens_with_pronoun(text: str) -> bool:
    first = _TOKEN.search(text)
    if first is None:
        return False
    token = first.group()
    if _RUN.fullmatch(token):
        return token.startswith(PRONOUN_PREFIXES)
    return _among(token, PRONOUN_SUBJECTS)


def _among(word: str, words: frozenset[str]) -> bool:
    """Whether `word` is one of `words`; a Korean word by its stem, its particle cut off ("그는": 그)."""
    return word.casefold() in words or (_HANGUL.search(word) is not None and stem(word) in words)


def _bigrams(run: str) -> set[str]:
    return {run[i : i + 2] for i in range(len(run) - 1)}


@functools.cache
def _cutter(ignore: frozenset[str], japanese: bool) -> re.Pattern[str]:
    """What splits a Chinese or Japanese run into content: hiragana, and the words of `ignore` written in
    those scripts, longest first. A run with kana is Japanese, where a single kanji is most often part of
    a word (京都, 一緒), so only longer words of `ignore` cut it."""
    words = sorted(
        (w for w in ignore if _RUN.fullmatch(w) and (len(w) > 1 or not japanese)), key=len, reverse=True
    )
    return re.compile("|".join([f"[{_HIRAGANA}]+", *map(re.escape, words)]))


def source_stems(pages: Sequence[Page]) -> set[str]:
    """What the source turns support: the stems of every word of both sides of each turn (stopwords too:
    "like" in a turn supports "likes" in a fact), every character and bigram of their Chinese and Japanese
    runs, and the same of their date, spelt as a model turns "yesterday" into a date ("7 May 2023",
    "Monday", "2023年5月7日", "星期日")."""
    stems: set[str] = set()
    for page in pages:
        stems |= _all_stems(f"{page.user_input}\n{page.agent_response}") | _date_stems(page.timestamp)
    return stems


def _all_stems(text: str) -> set[str]:
    stems = {stem(word) for word in _WORD.findall(text)}
    for run in _RUN.findall(text):
        stems |= set(run) | _bigrams(run)
    return stems


def _date_stems(timestamp: str) -> set[str]:
    try:
        moment = datetime.strptime(timestamp, TIMESTAMP_FORMAT)
    except ValueError:
        return content_stems(timestamp)
    weekday = moment.weekday()
    return _all_stems(
        f"{moment.year} {moment.month} {moment.day} {moment:%B %A} {moment.year}年{moment.month}月{moment.day}日 "
        f"星期{'一二三四五六日'[weekday]} {'月火水木金土日'[weekday]}曜日"
    )


@dataclass(frozen=True)
class GuardSettings:
    """The thresholds, from `MemoryConfig` (each setting's description says why it is what it is)."""

    fact_min_words: int
    fact_min_grounding: float
    profile_min_kept: float
    profile_min_grounding: float
    profile_max_unsupported: int

    @classmethod
    def of(cls, config: MemoryConfig) -> "GuardSettings":
        return cls(
            fact_min_words=config.guard_fact_min_words,
            fact_min_grounding=config.guard_fact_min_grounding,
            profile_min_kept=config.guard_profile_min_kept,
            profile_min_grounding=config.guard_profile_min_grounding,
            profile_max_unsupported=config.guard_profile_max_unsupported,
        )


def guards_enabled(config: MemoryConfig) -> bool:
    """`llm_guards`: "auto" guards the replies of a language model; the offline backend copies the turns'
    own sentences, which these checks would only slow down."""
    if config.llm_guards == "auto":
        return llm_endpoint_configured(config)
    return config.llm_guards == "on"


def fact_refusal(fact: str, sources: set[str], settings: GuardSettings) -> Rule | None:
    """Why `fact` may not be stored, or None. A fact is a sentence that stands alone (at least
    `fact_min_words` words, one of them content, not opening with a pronoun), and at least
    `fact_min_grounding` of its content words occur in its source turns."""
    content = content_stems(fact)
    if word_count(fact) < settings.fact_min_words or not content or _opens_with_pronoun(fact):
        return "fact_not_sentence"
    if _grounded_share(content, sources) < settings.fact_min_grounding:
        return "fact_ungrounded"
    return None


def profile_refusal(
    previous: str, proposed: str, sources: set[str], settings: GuardSettings
) -> tuple[Rule, int] | None:
    """Why the proposed profile may not replace `previous`, with a count (previous words lost, or new
    attributes unsupported), or None.

    Dropped: less than `profile_min_kept` of the previous profile's content words are still there (the
    prompt asks to keep every line the conversation does not contradict; a model that rewrote the profile
    from the last turns alone loses the rest). Unsupported: more than `profile_max_unsupported` new
    attributes (a line, or an item of a comma-separated line) whose new words are less than
    `profile_min_grounding` found in the turns.
    """
    before = content_stems(previous, _PROFILE_IGNORED)
    after = content_stems(proposed, _PROFILE_IGNORED)
    if before:
        lost = len(before - after)
        if 1 - lost / len(before) < settings.profile_min_kept:
            return "profile_dropped", lost
    unsupported = sum(
        1
        for attribute in _attributes(proposed)
        if (new := content_stems(attribute, _PROFILE_IGNORED) - before)
        and _grounded_share(new, sources) < settings.profile_min_grounding
    )
    if unsupported > settings.profile_max_unsupported:
        return "profile_unsupported", unsupported
    return None


def _attributes(profile: str) -> list[str]:
    """A profile's attributes: its lines, and the items of a line that lists several."""
    return [part for part in (p.strip(" -*•\t") for p in _ATTRIBUTE_SPLIT.split(profile)) if part]


def _grounded_share(content: set[str], sources: set[str]) -> float:
    return len(content & sources) / len(content) if content else 1.0


class RefusalCounter:
    """Proposals refused, per rule, and slices deferred or given up, since the process started.
    Consolidation runs on the scheduler's loop while metrics are read from other threads, so it takes a
    lock; readers get a copy."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[Rule | SliceOutcome, int] = {}

    def record(self, rule: Rule | SliceOutcome, count: int = 1) -> None:
        with self._lock:
            self._counts[rule] = self._counts.get(rule, 0) + count

    def snapshot(self) -> dict[Rule | SliceOutcome, int]:
        with self._lock:
            return dict(self._counts)


REFUSALS = RefusalCounter()
"""The process's refusals, every space together: what a metrics collector reads."""


@dataclass(frozen=True)
class ProposalGuard:
    """The checks of one slice of pages, for one space (named by its path in the logs)."""

    settings: GuardSettings
    space: str
    pages: Sequence[Page]
    counter: RefusalCounter = REFUSALS

    @functools.cached_property
    def sources(self) -> set[str]:
        """The slice's `source_stems`, found once for all its facts and its profile."""
        return source_stems(self.pages)

    def facts(self, kind: str, facts: Iterable[str]) -> list[str]:
        """The facts that pass; each refused one is counted, and the slice's refusals logged once."""
        kept: list[str] = []
        refused: dict[Rule, int] = {}
        for fact in facts:
            rule = fact_refusal(fact, self.sources, self.settings)
            if rule is None:
                kept.append(fact)
                continue
            refused[rule] = refused.get(rule, 0) + 1
            self.counter.record(rule)
            log.debug("fact refused (%s): %r", rule, fact)
        if refused:
            log.info(
                "LLM facts refused",
                extra={
                    "space": self.space,
                    "kind": kind,
                    "pages": _page_range(self.pages),
                    "refused": refused,
                },
            )
        return kept

    def profile(self, previous: str, proposed: str) -> bool:
        """Whether `proposed` may replace `previous`; a refusal is counted and logged."""
        verdict = profile_refusal(previous, proposed, self.sources, self.settings)
        if verdict is None:
            return True
        rule, count = verdict
        self.counter.record(rule)
        log.info(
            "LLM profile update refused",
            extra={"space": self.space, "rule": rule, "count": count, "pages": _page_range(self.pages)},
        )
        log.debug("profile refused (%s): %r replacing %r", rule, proposed, previous)
        return False


def _page_range(pages: Sequence[Page]) -> str:
    return f"{pages[0].page_id}-{pages[-1].page_id}" if pages else ""
