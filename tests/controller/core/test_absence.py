from controller.core.absence import Absences


def test_a_short_absence_costs_no_record() -> None:
    absences = Absences(grace=10.0)
    absences.lost("a", 0.0, 0.0)
    assert "a" in absences
    assert absences.deadline("a") == 10.0
    absences.back("a")
    assert "a" not in absences
    assert absences.to_record(100.0) == []
    assert absences.expired(100.0) == []


def test_a_long_absence_is_recorded_at_half_the_grace_then_expires() -> None:
    absences = Absences(grace=10.0)
    absences.lost("a", 1.0, 2.0)
    assert absences.earliest() == 7.0  # recorded at now + grace / 2
    assert absences.to_record(6.9) == []
    assert absences.to_record(7.0) == [("a", 1.0)]
    assert absences.earliest() == 11.0
    assert absences.expired(11.0) == [("a", 11.0)]
    assert absences.earliest() is None


def test_a_recovered_absence_is_not_recorded_again() -> None:
    absences = Absences(grace=10.0)
    absences.lost("a", 3.0, 5.0, recorded=True)
    assert absences.to_record(100.0) == []
    assert absences.expired(100.0) == [("a", 13.0)]


def test_an_earlier_sighting_shortens_the_grace_and_the_record_says_so() -> None:
    absences = Absences(grace=10.0)
    absences.lost("a", 5.0, 5.0)
    assert absences.seen_since("a", 2.0)
    assert absences.deadline("a") == 12.0
    assert absences.to_record(10.0) == [("a", 2.0)]
    assert not absences.seen_since("b", 0.0)  # in no grace: nothing to shorten
    assert absences.seen_since("a", 4.0)
    assert absences.deadline("a") == 12.0
