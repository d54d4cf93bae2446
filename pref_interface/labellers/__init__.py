"""Who answers: synthetic teachers and a person, with the clip players and the labelling page
they watch."""
